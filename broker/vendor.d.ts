// The Redis adapters ship no type declarations; only the factories are used here.
declare module 'aedes-persistence-redis' {
  const factory: (opts: Record<string, unknown>) => unknown;
  export default factory;
}
declare module 'mqemitter-redis' {
  const factory: (opts: Record<string, unknown>) => unknown;
  export default factory;
}
declare module 'aedes-persistence' {
  const factory: (opts?: Record<string, unknown>) => unknown;
  export default factory;
}
