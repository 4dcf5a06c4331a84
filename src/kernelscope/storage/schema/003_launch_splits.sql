-- kernelscope store, schema version 3: the launch-and-queue split of every GPU activity, computed once at
-- ingest (storage/derive.py, insert_launch_splits) and read by the launch, bound, whatif, summary and power
-- analyses.
-- Definitions: docs/metrics.md "Launch overhead". Times int64 ns. The INSERTs below fill the tables for traces
-- already stored when a store is migrated; they are derive.launch_splits_sql('TRUE') verbatim (a test checks).

-- One row per GPU activity with a launch call (gpu_activities.launch_id not null), sorted by
-- (trace_id, device, stream, start_ns, activity_id).
CREATE TABLE activity_splits (
    trace_id        VARCHAR NOT NULL,
    activity_id     BIGINT NOT NULL,
    kind            VARCHAR NOT NULL,      -- 'kernel' | 'memcpy' | 'memset'
    device          INTEGER,
    stream          BIGINT,
    start_ns        BIGINT NOT NULL,
    end_ns          BIGINT NOT NULL,
    is_graph        BOOLEAN NOT NULL,
    launch_id       BIGINT NOT NULL,
    launch_start_ns BIGINT,                -- the launch call's start / end
    launch_end_ns   BIGINT,
    prev_end_ns     BIGINT,                -- end of the previous activity on (device, stream) by (start, activity_id)
    top_op_id       BIGINT,                -- the activity's, else its launch call's
    leaf_op_id      BIGINT,
    phase_id        BIGINT,                -- the launch call's innermost annotation
    lq_ns           BIGINT,                -- start - launch start (negative under clock skew, never clamped)
    api_ns          BIGINT,                -- min(launch dur, lq)
    queue_ns        BIGINT,                -- clamp(ready - launch end, 0, lq - api); ready = prev_end_ns else launch end
    dispatch_ns     BIGINT,                -- lq - api - queue
    launch_delay_ns BIGINT,                -- max(0, start - launch end)
    term            BOOLEAN                -- a TKLQT term: a kernel not launched by a graph, or a graph launch's first node
);

-- Per operator instance (link 'top': top-level operator, 'leaf': leaf operator) with at least one TKLQT term,
-- plus one row per link with a null op_id for the terms outside every operator.
CREATE TABLE op_launch (
    trace_id        VARCHAR NOT NULL,
    link            VARCHAR NOT NULL,      -- 'top' | 'leaf'
    op_id           BIGINT,
    name            VARCHAR,               -- the operator's name (null with op_id)
    kernels         BIGINT,                -- TKLQT terms that are kernels not launched by a graph
    graph_launches  BIGINT,                -- TKLQT terms that are graph launches (first nodes)
    graph_kernels   BIGINT,                -- graph-node kernels
    tklqt_ns        BIGINT,                -- sums over the terms
    api_ns          BIGINT,
    queue_ns        BIGINT,
    dispatch_ns     BIGINT,
    launch_delay_ns BIGINT,
    launch_api_ns   BIGINT,                -- summed duration of the instance's launch calls with GPU activities
    gpu_union_ns    BIGINT                 -- length of the union of the instance's activity intervals
);

-- Kernels per operator instance (link 'top' | 'leaf') with at least one kernel: count and summed duration.
CREATE TABLE op_kernels (
    trace_id        VARCHAR NOT NULL,
    link            VARCHAR NOT NULL,      -- 'top' | 'leaf'
    op_id           BIGINT NOT NULL,
    name            VARCHAR,               -- the operator's name
    has_op          BOOLEAN NOT NULL,      -- a cpu_ops row with op_id exists
    kernels         BIGINT NOT NULL,
    kernel_time_ns  BIGINT NOT NULL
);

INSERT INTO activity_splits
WITH a AS (
  SELECT trace_id, activity_id, kind, device, stream, start_ns, end_ns, is_graph, launch_id, leaf_op_id, top_op_id,
         lag(end_ns) OVER (PARTITION BY trace_id, device, stream ORDER BY start_ns, activity_id) AS prev_end
  FROM gpu_activities WHERE TRUE
), graph_launch AS (
  SELECT DISTINCT trace_id, launch_id FROM gpu_activities WHERE TRUE AND is_graph
), first_node AS (
  SELECT g.trace_id, min({'s': g.start_ns, 'a': g.activity_id}).a AS activity_id
  FROM gpu_activities g SEMI JOIN graph_launch USING (trace_id, launch_id)
  WHERE TRUE
  GROUP BY g.trace_id, g.launch_id
), s AS (
  SELECT a.*, l.start_ns AS launch_start_ns, l.end_ns AS launch_end_ns, l.dur_ns AS launch_dur_ns, l.phase_id,
         l.top_op_id AS launch_top_op_id, l.leaf_op_id AS launch_leaf_op_id,
         a.start_ns - l.start_ns AS lq_ns, least(l.dur_ns, a.start_ns - l.start_ns) AS api_ns,
         coalesce(a.prev_end, l.end_ns) AS ready_ns, f.activity_id IS NOT NULL AS first_node
  FROM a
  LEFT JOIN (SELECT * FROM launches WHERE TRUE) l ON l.trace_id = a.trace_id AND l.launch_id = a.launch_id
  LEFT JOIN first_node f ON f.trace_id = a.trace_id AND f.activity_id = a.activity_id
  WHERE a.launch_id IS NOT NULL
)
SELECT trace_id, activity_id, kind, device, stream, start_ns, end_ns, is_graph, launch_id,
       launch_start_ns, launch_end_ns, prev_end,
       coalesce(top_op_id, launch_top_op_id), coalesce(leaf_op_id, launch_leaf_op_id), phase_id,
       lq_ns, api_ns,
       greatest(0, least(ready_ns - launch_end_ns, lq_ns - api_ns)),
       lq_ns - api_ns - greatest(0, least(ready_ns - launch_end_ns, lq_ns - api_ns)),
       greatest(0, start_ns - launch_end_ns),
       (kind = 'kernel' AND (NOT is_graph OR first_node))
FROM s ORDER BY trace_id, device, stream, start_ns, activity_id;

INSERT INTO op_launch
WITH x AS (SELECT * FROM activity_splits WHERE TRUE)
SELECT t.trace_id, 'top' AS link, t.op_id, op.name, t.kernels, t.graph_launches, t.graph_kernels,
       t.tklqt_ns, t.api_ns, t.queue_ns, t.dispatch_ns, t.launch_delay_ns,
       coalesce(c.launch_api_ns, 0) AS launch_api_ns,
       CASE WHEN t.op_id IS NULL THEN 0 WHEN t.acts = 1 THEN t.lone_union_ns
            ELSE coalesce(un.gpu_union_ns, 0) END AS gpu_union_ns
FROM (
  SELECT trace_id, top_op_id AS op_id,
         count(*) FILTER (WHERE term AND kind = 'kernel' AND NOT is_graph) AS kernels,
         count(*) FILTER (WHERE term AND is_graph) AS graph_launches,
         count(*) FILTER (WHERE is_graph AND kind = 'kernel') AS graph_kernels,
         count(*) FILTER (WHERE term) AS terms,
         sum(lq_ns) FILTER (WHERE term) AS tklqt_ns, sum(api_ns) FILTER (WHERE term) AS api_ns,
         sum(queue_ns) FILTER (WHERE term) AS queue_ns, sum(dispatch_ns) FILTER (WHERE term) AS dispatch_ns,
         sum(launch_delay_ns) FILTER (WHERE term) AS launch_delay_ns,
         count(*) AS acts, max(greatest(0, end_ns - start_ns)) AS lone_union_ns
  FROM x GROUP BY 1, 2
) t
LEFT JOIN (
  SELECT trace_id, top_op_id AS op_id, sum(dur_ns) AS launch_api_ns
  FROM launches WHERE TRUE AND activities > 0 AND top_op_id IS NOT NULL GROUP BY 1, 2
) c ON c.trace_id = t.trace_id AND c.op_id = t.op_id
LEFT JOIN (
  SELECT trace_id, op_id, sum(greatest(0, end_ns - greatest(start_ns, coalesce(prev_end, start_ns)))) AS gpu_union_ns
  FROM (
    SELECT x.trace_id, x.top_op_id AS op_id, x.start_ns, x.end_ns,
           max(x.end_ns) OVER (PARTITION BY x.trace_id, x.top_op_id ORDER BY x.start_ns, x.end_ns
                               ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING) AS prev_end
    FROM x SEMI JOIN (SELECT trace_id, top_op_id FROM x WHERE top_op_id IS NOT NULL
                      GROUP BY 1, 2 HAVING count(*) > 1 AND count(*) FILTER (WHERE term) > 0) m
      ON m.trace_id = x.trace_id AND m.top_op_id = x.top_op_id
  ) GROUP BY 1, 2
) un ON un.trace_id = t.trace_id AND un.op_id = t.op_id
LEFT JOIN (SELECT trace_id, op_id, name FROM cpu_ops WHERE TRUE) op
  ON op.trace_id = t.trace_id AND op.op_id = t.op_id
WHERE t.terms > 0
UNION ALL
SELECT t.trace_id, 'leaf' AS link, t.op_id, op.name, t.kernels, t.graph_launches, t.graph_kernels,
       t.tklqt_ns, t.api_ns, t.queue_ns, t.dispatch_ns, t.launch_delay_ns,
       coalesce(c.launch_api_ns, 0) AS launch_api_ns,
       CASE WHEN t.op_id IS NULL THEN 0 WHEN t.acts = 1 THEN t.lone_union_ns
            ELSE coalesce(un.gpu_union_ns, 0) END AS gpu_union_ns
FROM (
  SELECT trace_id, leaf_op_id AS op_id,
         count(*) FILTER (WHERE term AND kind = 'kernel' AND NOT is_graph) AS kernels,
         count(*) FILTER (WHERE term AND is_graph) AS graph_launches,
         count(*) FILTER (WHERE is_graph AND kind = 'kernel') AS graph_kernels,
         count(*) FILTER (WHERE term) AS terms,
         sum(lq_ns) FILTER (WHERE term) AS tklqt_ns, sum(api_ns) FILTER (WHERE term) AS api_ns,
         sum(queue_ns) FILTER (WHERE term) AS queue_ns, sum(dispatch_ns) FILTER (WHERE term) AS dispatch_ns,
         sum(launch_delay_ns) FILTER (WHERE term) AS launch_delay_ns,
         count(*) AS acts, max(greatest(0, end_ns - start_ns)) AS lone_union_ns
  FROM x GROUP BY 1, 2
) t
LEFT JOIN (
  SELECT trace_id, leaf_op_id AS op_id, sum(dur_ns) AS launch_api_ns
  FROM launches WHERE TRUE AND activities > 0 AND leaf_op_id IS NOT NULL GROUP BY 1, 2
) c ON c.trace_id = t.trace_id AND c.op_id = t.op_id
LEFT JOIN (
  SELECT trace_id, op_id, sum(greatest(0, end_ns - greatest(start_ns, coalesce(prev_end, start_ns)))) AS gpu_union_ns
  FROM (
    SELECT x.trace_id, x.leaf_op_id AS op_id, x.start_ns, x.end_ns,
           max(x.end_ns) OVER (PARTITION BY x.trace_id, x.leaf_op_id ORDER BY x.start_ns, x.end_ns
                               ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING) AS prev_end
    FROM x SEMI JOIN (SELECT trace_id, leaf_op_id FROM x WHERE leaf_op_id IS NOT NULL
                      GROUP BY 1, 2 HAVING count(*) > 1 AND count(*) FILTER (WHERE term) > 0) m
      ON m.trace_id = x.trace_id AND m.leaf_op_id = x.leaf_op_id
  ) GROUP BY 1, 2
) un ON un.trace_id = t.trace_id AND un.op_id = t.op_id
LEFT JOIN (SELECT trace_id, op_id, name FROM cpu_ops WHERE TRUE) op
  ON op.trace_id = t.trace_id AND op.op_id = t.op_id
WHERE t.terms > 0;

INSERT INTO op_kernels
SELECT i.trace_id, 'top' AS link, i.op_id, o.name, o.op_id IS NOT NULL AS has_op, i.kernels, i.kernel_time_ns
FROM (
  SELECT trace_id, top_op_id AS op_id, count(*) AS kernels, sum(dur_ns) AS kernel_time_ns
  FROM gpu_activities WHERE TRUE AND kind = 'kernel' AND top_op_id IS NOT NULL GROUP BY 1, 2
) i
LEFT JOIN (SELECT trace_id, op_id, name FROM cpu_ops WHERE TRUE) o
  ON o.trace_id = i.trace_id AND o.op_id = i.op_id
UNION ALL
SELECT i.trace_id, 'leaf' AS link, i.op_id, o.name, o.op_id IS NOT NULL AS has_op, i.kernels, i.kernel_time_ns
FROM (
  SELECT trace_id, leaf_op_id AS op_id, count(*) AS kernels, sum(dur_ns) AS kernel_time_ns
  FROM gpu_activities WHERE TRUE AND kind = 'kernel' AND leaf_op_id IS NOT NULL GROUP BY 1, 2
) i
LEFT JOIN (SELECT trace_id, op_id, name FROM cpu_ops WHERE TRUE) o
  ON o.trace_id = i.trace_id AND o.op_id = i.op_id;
