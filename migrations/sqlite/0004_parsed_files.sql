-- Files parsed for registrations, remembered so a file already parsed (same URL and validator)
-- is never parsed again: a rescan, a re-registration with one more file, or a second store over
-- the same files costs only what is new.
create table parsed_files (
    url text not null,
    -- 'etag:<ETag>', else 'size:<n>:<last_modified>': which content of the file was parsed
    validator text not null,
    -- the parser used or asked for and the settings that change a parse's output
    parse_key text not null,
    -- the parse's result (parser name, hierarchy, warnings) as JSON, zstd-compressed
    data blob not null,
    -- unix milliseconds
    written_at integer not null default (cast(strftime('%s', 'now') as integer) * 1000),
    constraint parsed_files_pkey primary key (url, validator, parse_key)
);
