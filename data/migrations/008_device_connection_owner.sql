-- With REDIS_URL several processes share the devices; a dead process's stored will must not mark
-- OFFLINE a device that is connected to another process. The row names the broker process (aedes id)
-- holding the device's connection, set on CONNECT and cleared by that same process on disconnect.
ALTER TABLE devices ADD COLUMN connected_broker TEXT;
