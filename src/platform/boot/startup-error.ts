/** A start-up failure an operator can act on; main prints its message as the one line. */
export class StartupError extends Error {}
