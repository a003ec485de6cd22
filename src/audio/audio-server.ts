/**
 * The audio server as the core needs it: Icecast 2.4's admin API (icecast.org/docs/icecast-2.4.1/admin-interface.html),
 * implemented by icecast/admin-client.ts and handed in by the composition root. Every call is bounded in time; an
 * answer that did not come is a value (`unreachable`), never a throw, so a slow or dead Icecast degrades the audio
 * part only.
 */
export interface ListedClient {
  /** Icecast's client id: the `client` of listener_add, the `id` of /admin/killclient. */
  id: number;
  ip: string | null;
  connectedSeconds: number | null;
}

export type AudioServerProblem = 'unreachable' | 'refused' | 'bad_answer';

export type AudioServerResult<T> = { ok: true; value: T } | { ok: false; problem: AudioServerProblem; detail: string };

export interface AudioServer {
  /** The mounts with a live source (/admin/listmounts). */
  listMounts(): Promise<AudioServerResult<string[]>>;
  /** The listeners of a mount (/admin/listclients); null when the mount has no source. */
  listClients(mount: string): Promise<AudioServerResult<ListedClient[] | null>>;
  /** Removes one listener (/admin/killclient); false when Icecast did not know it (already gone). */
  killClient(mount: string, clientId: number): Promise<AudioServerResult<boolean>>;
  /** Drops a mount's source (/admin/killsource); false when there was none. */
  killSource(mount: string): Promise<AudioServerResult<boolean>>;
}
