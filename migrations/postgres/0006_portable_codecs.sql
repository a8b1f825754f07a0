-- A version served with portable codecs (`?codecs=portable`): arrays whose codecs some client
-- cannot decode are served with `bytes` and gzip (or their own portable compressor), their
-- chunks transcoded when read. The stored metadata and references stay the files' own.
alter table versions add column portable boolean not null default false;
