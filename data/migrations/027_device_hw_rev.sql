-- The hardware revision a device last reported (docs/api.md, "Firmware updates": a rollout targets the devices
-- of an image's kind and hw_rev): from its pairing request at approval, and from each get_state answer
-- (docs/firmware.md, "4.2 Commands"). NULL until one of them told it; such a device is never targeted.
ALTER TABLE devices ADD COLUMN hw_rev TEXT;
