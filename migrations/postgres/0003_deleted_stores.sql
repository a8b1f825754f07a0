-- Stores deleted and not registered again. The data plane answers their keys 410, not 404: a
-- reader still holding a deleted store's metadata would read every 404 chunk as fill values.
create table deleted_stores (
    name text primary key,
    deleted_at timestamptz not null default now()
);
