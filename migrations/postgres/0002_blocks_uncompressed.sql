-- Blocks are stored out of line but not compressed (TOAST storage EXTERNAL): pglz gains a
-- factor of two on their fixed-width records but costs registration time and cold-read
-- latency (bench/block_size.py: with blocks of 1,024 references, registration 12.2 s instead of
-- 15.5 s for 10 million references, cold-read p99 1.1 ms instead of 2.2 ms). Rows written
-- before this keep their compression.
alter table blocks alter column data set storage external;
