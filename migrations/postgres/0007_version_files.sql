-- The files a version made from files (`?format=files`) was read from, one row each, in order:
-- its origin's text keeps the rest (the registration, the parser, how they were combined). Kept
-- in the origin's text, 100,000 files were one 30 MB value, written whole and read whole by
-- every page of them shown.
create table version_files (
    version_id bigint not null references versions (id) on delete cascade,
    -- the file's place in the version's order, from 0
    seq bigint not null,
    -- the file's record (URL, facts, parser, what reading it cost) as JSON text
    record text not null,
    primary key (version_id, seq)
);
