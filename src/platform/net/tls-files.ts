import crypto from 'node:crypto';
import fs from 'node:fs';

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

function readSetting(setting: string, file: string): { ok: true; data: Buffer } | { ok: false; error: string } {
  try {
    return { ok: true, data: fs.readFileSync(file) };
  } catch (err) {
    return { ok: false, error: `${setting}: cannot read ${file} (${(err as NodeJS.ErrnoException).code ?? 'error'})` };
  }
}
