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

/**
 * A child logger made on its first use: most requests log nothing but their one request line, and a
 * pino child per request (its bindings serialized) was a measurable share of a bare route (issue 13).
 * A class, not an object of six closures per request (under tsx each closure also passes esbuild's __name
 * helper, which showed in the profile).
 */
export class LazyChild implements Logger {
  #made: Logger | undefined;
  constructor(
    private readonly parent: Logger,
    private readonly bindings: Record<string, unknown>,
  ) {}
  #child(): Logger {
    return (this.#made ??= this.parent.child(this.bindings));
  }
  debug(obj: object, msg?: string): void {
    this.#child().debug(obj, msg);
  }
  info(obj: object, msg?: string): void {
    this.#child().info(obj, msg);
  }
  warn(obj: object, msg?: string): void {
    this.#child().warn(obj, msg);
  }
  error(obj: object, msg?: string): void {
    this.#child().error(obj, msg);
  }
  child(bindings: Record<string, unknown>): Logger {
    return this.#child().child(bindings);
  }
  isLevelEnabled(level: 'debug' | 'info' | 'warn' | 'error'): boolean {
    return this.parent.isLevelEnabled?.(level) ?? true;
  }
}
