-- The catalog: object stores, stores, their immutable versions, nodes and manifest blocks.
-- Times are unix milliseconds.

create table object_stores (
    name text primary key,
    url text not null,
    options text not null default '{}',
    created_at integer not null,
    updated_at integer not null,
    constraint object_stores_url_key unique (url)
);

create table stores (
    name text primary key,
    -- null only inside the transaction that creates the store
    current_version integer references versions (id) deferrable initially deferred,
    created_at integer not null,
    updated_at integer not null
);

-- AUTOINCREMENT: ids are never reused, so a version id names one content forever.
create table versions (
    id integer primary key autoincrement,
    store text not null references stores (name) on delete cascade,
    created_at integer not null,
    -- answer missing chunks with a fill-value chunk instead of 404
    fill_missing integer not null default 0,
    summary text not null
);
create index versions_store_idx on versions (store, id);

create table nodes (
    version_id integer not null references versions (id) on delete cascade,
    path text not null,
    metadata text not null,
    -- arrays: their tile shape in chunks (JSON list), fixed when the array first appeared
    tile_shape text,
    primary key (version_id, path)
) without rowid;

-- Blocks belong to a store, shared by the versions whose tiles point at them.
create table blocks (
    id integer primary key,
    store text not null references stores (name) on delete cascade,
    data blob not null
);

create table tiles (
    version_id integer not null references versions (id) on delete cascade,
    node text not null,
    tile integer not null,
    block_id integer not null references blocks (id),
    primary key (version_id, node, tile)
) without rowid;
create index tiles_block_idx on tiles (block_id);

create table sources (
    version_id integer not null references versions (id) on delete cascade,
    url text not null,
    etag text,
    last_modified text,
    size integer,
    primary key (version_id, url)
) without rowid;
