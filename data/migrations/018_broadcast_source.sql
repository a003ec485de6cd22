-- With an audio server, a broadcast started while its mosque's source is not on air waits for it: the players
-- hear the start when the source goes live (src/broadcasts/source-follow.ts). A fallback plays the mosque's
-- recorded azaan when the live one was missed.
ALTER TABLE broadcasts ADD COLUMN waiting_for_source INTEGER NOT NULL DEFAULT 0;
ALTER TABLE broadcasts ADD COLUMN fallback INTEGER NOT NULL DEFAULT 0;
