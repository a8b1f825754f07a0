-- Where a version came from when it was not sent as a document: an Icechunk store's repository,
-- reference and snapshot, as JSON text (null for manifests sent in the request).
alter table versions add column origin text;
