-- Periodic duties of the whole deployment (docs/operator.md, "Several hosts"): each run of a duty (its name and its
-- period's number) is claimed by one process with one conditional write here, held while it runs, and marked done.
-- A claim not renewed (its process died) expires, and another process takes the run over. With one process every
-- run is its own; the rows cost one write per duty and period.
CREATE TABLE duty_runs (
  duty    TEXT NOT NULL,      -- e.g. 'timeline prune'
  period  INTEGER NOT NULL,   -- floor(time / the duty's period): one run per period
  node    TEXT NOT NULL,      -- the claiming process's id for its current start
  until   INTEGER NOT NULL,   -- Unix milliseconds: the claim lapses then unless renewed
  done    INTEGER NOT NULL,   -- 1 once the run finished
  PRIMARY KEY (duty, period)
) WITHOUT ROWID;
