-- The catalog: object stores, stores, their immutable versions, nodes and manifest blocks.

-- Object stores registered over the API (those declared in the configuration file live there).
create table object_stores (
    name text primary key,
    url text not null,
    options jsonb not null default '{}',
    created_at timestamptz not null default now(),
    updated_at timestamptz not null default now(),
    constraint object_stores_url_key unique (url)
);

create table stores (
    name text primary key,
    -- null only inside the transaction that creates the store
    current_version bigint,
    created_at timestamptz not null default now(),
    updated_at timestamptz not null default now()
);

-- Identity values are never reused, so a version id names one content forever: CDN-cached
-- @{version} URLs stay truthful even if a store is deleted and registered again.
create table versions (
    id bigint generated always as identity primary key,
    store text not null references stores (name) on delete cascade,
    created_at timestamptz not null default now(),
    -- answer missing chunks with a fill-value chunk instead of 404 (for caches that mishandle 404)
    fill_missing boolean not null default false,
    summary jsonb not null
);
create index versions_store_idx on versions (store, id);

alter table stores add constraint stores_current_version_fkey
    foreign key (current_version) references versions (id) deferrable initially deferred;

create table nodes (
    version_id bigint not null references versions (id) on delete cascade,
    path text not null,
    -- the node's zarr.json as registered, without manifest or consolidated metadata
    metadata text not null,
    -- arrays: the shape of their tiles in chunks (JSON list), fixed when the array first
    -- appeared so that growing it keeps its blocks
    tile_shape text,
    primary key (version_id, path)
);

-- Blocks belong to a store, not to a version: a version that changes a few tiles shares the
-- others with its predecessor. Blocks no tile points at are garbage collected.
create sequence blocks_id_seq;
create table blocks (
    id bigint primary key default nextval('blocks_id_seq'),
    store text not null references stores (name) on delete cascade,
    data bytea not null
);
alter sequence blocks_id_seq owned by blocks.id;

create table tiles (
    version_id bigint not null references versions (id) on delete cascade,
    node text not null,
    tile bigint not null,
    block_id bigint not null references blocks (id),
    primary key (version_id, node, tile)
);
create index tiles_block_idx on tiles (block_id);

-- Every source object a version references, with the facts recorded for stale detection.
create table sources (
    version_id bigint not null references versions (id) on delete cascade,
    url text not null,
    etag text,
    last_modified text,
    size bigint,
    primary key (version_id, url)
);
