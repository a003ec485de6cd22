import crypto from 'node:crypto';
import fs from 'node:fs';
import type { Config } from '../config.ts';
import type { Logger } from '../log.ts';
import { StartupError } from '../boot/startup-error.ts';

/** A PEM certificate chain and its private key, checked to belong together. */
export interface TlsCredentials {
  cert: Buffer;
  key: Buffer;
  /** When the leaf certificate expires (ISO-8601), for the log line an operator looks for after a renewal. */
  validTo: string;
}

export type TlsLoad = { ok: true; credentials: TlsCredentials } | { ok: false; error: string };

/**
 * Reads TLS_CERT_FILE and TLS_KEY_FILE. Every problem is one line naming the setting, so a bad file stops the
 * start (or, on SIGHUP, leaves the certificate in use as it was) with a reason an operator can act on.
 */
export function loadTlsCredentials(certFile: string, keyFile: string): TlsLoad {
  const cert = readSetting('TLS_CERT_FILE', certFile);
  if (!cert.ok) return cert;
  const key = readSetting('TLS_KEY_FILE', keyFile);
  if (!key.ok) return key;
  let x509: crypto.X509Certificate;
  try {
    x509 = new crypto.X509Certificate(cert.data);
  } catch {
    return { ok: false, error: `TLS_CERT_FILE: ${certFile} does not hold a PEM certificate` };
  }
  let privateKey: crypto.KeyObject;
  try {
    privateKey = crypto.createPrivateKey(key.data);
  } catch {
    return { ok: false, error: `TLS_KEY_FILE: ${keyFile} does not hold an unencrypted PEM private key` };
  }
  if (!x509.checkPrivateKey(privateKey)) {
    return { ok: false, error: `TLS_KEY_FILE: ${keyFile} is not the key of the certificate in TLS_CERT_FILE` };
  }
  return { ok: true, credentials: { cert: cert.data, key: key.data, validTo: new Date(x509.validTo).toISOString() } };
}

/** MQTTS_PORT set: the certificate and key must be usable before anything opens (one line otherwise). */
export function readTlsAtStart(config: Config, logger: Logger): TlsCredentials | undefined {
  if (config.mqttsPort === undefined) return undefined;
  const loaded = loadTlsCredentials(config.tlsCertFile!, config.tlsKeyFile!);
  if (!loaded.ok) throw new StartupError(loaded.error);
  logger.info({ cert_file: config.tlsCertFile, valid_to: loaded.credentials.validTo }, 'mqtts certificate loaded');
  return loaded.credentials;
}

/** Reads TLS_CERT_FILE and TLS_KEY_FILE again (SIGHUP after a renewal); a bad pair leaves the one in use. */
export function reloadTls(
  config: Config, server: { tlsServer: unknown; setTlsCredentials(credentials: TlsCredentials): void },
): { ok: true; validTo: string } | { ok: false; error: string } {
  if (!server.tlsServer) return { ok: false, error: 'MQTTS_PORT is not set: there is no certificate to reload' };
  const loaded = loadTlsCredentials(config.tlsCertFile!, config.tlsKeyFile!);
  if (!loaded.ok) return loaded;
  try {
    server.setTlsCredentials(loaded.credentials);
  } catch (err) {
    // A signal handler must not throw: the pair is refused and the one in use stays.
    return { ok: false, error: `TLS_CERT_FILE/TLS_KEY_FILE: ${(err as Error).message}` };
  }
  return { ok: true, validTo: loaded.credentials.validTo };
}

function readSetting(setting: string, file: string): { ok: true; data: Buffer } | { ok: false; error: string } {
  try {
    return { ok: true, data: fs.readFileSync(file) };
  } catch (err) {
    return { ok: false, error: `${setting}: cannot read ${file} (${(err as NodeJS.ErrnoException).code ?? 'error'})` };
  }
}
