/**
 * The logging port. pino satisfies it; src/ never imports pino (dependency rule), it receives a Logger.
 * Never put a password, hash, code, OTP or token into a log field.
 */
export interface Logger {
  debug(obj: object, msg?: string): void;
  info(obj: object, msg?: string): void;
  warn(obj: object, msg?: string): void;
  error(obj: object, msg?: string): void;
  child(bindings: Record<string, unknown>): Logger;
  /** Whether a line at this level would be written; lets a hot path skip building it (pino has it). */
  isLevelEnabled?(level: 'debug' | 'info' | 'warn' | 'error'): boolean;
}

export const silentLogger: Logger = {
  debug() {},
  info() {},
  warn() {},
  error() {},
  child() {
    return silentLogger;
  },
  isLevelEnabled() {
    return false;
  },
};

