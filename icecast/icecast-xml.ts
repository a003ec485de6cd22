import crypto from 'node:crypto';
import { ACTIONS, HOOK_PATH, HOOK_USER } from '../src/audio/callbacks.ts';

/**
 * The icecast.xml `npx minaret icecast-config` prints (docs/operator.md#audio-icecast): Icecast 2.4 as Minaret's
 * gated audio server. Every mount is governed by one `<mount type="default">` whose URL authentication asks
 * Minaret (icecast.org/docs/icecast-2.4.1/auth.html, "URL"); no password is a default one.
 */
export interface IcecastXmlOptions {
  port: number;
  /** The address Icecast listens on: 127.0.0.1 unless the operator names another (`--bind`). */
  bindAddress: string;
  /** Where Icecast reaches Minaret's callbacks: PUBLIC_URL, else the local HTTP port. */
  minaretUrl: string;
  hookSecret: string;
  adminUser: string;
  adminPassword: string;
  /** Icecast demands one; nobody uses it (sources authenticate as their transmitter): random unless given. */
  sourcePassword?: string | undefined;
  hostname: string;
  logDir: string;
  /** Add `<changeowner>`: Icecast started as root binds its port, then runs as this user (it refuses to run as root). */
  changeOwner?: { user: string; group: string } | undefined;
  /** How many listeners Icecast serves at once, all mounts together. */
  maxClients?: number;
  maxSources?: number;
}


const randomPassword = () => crypto.randomBytes(24).toString('base64url');

export function escapeXml(s: string): string {
  return s.replace(/[<>&"']/g, (c) => ({ '<': '&lt;', '>': '&gt;', '&': '&amp;', '"': '&quot;', "'": '&apos;' })[c]!);
}

export function icecastXml(o: IcecastXmlOptions): string {
  const x = escapeXml;
  const hook = (action: string) => `${o.minaretUrl.replace(/\/+$/, '')}${HOOK_PATH}/${action}`;
  const owner = o.changeOwner ? `\n    <changeowner><user>${x(o.changeOwner.user)}</user><group>${x(o.changeOwner.group)}</group></changeowner>` : '';
  return `<?xml version="1.0"?>
<!-- Written by \`npx minaret icecast-config\`: Minaret's gated audio server (docs/operator.md, "Audio: Icecast").
     Every listener and source is asked of Minaret; with Minaret unreachable, Icecast refuses them (it fails closed). -->
<icecast>
  <location>Minaret</location>
  <admin>minaret@${x(o.hostname)}</admin>
  <hostname>${x(o.hostname)}</hostname>
  <limits>
    <clients>${o.maxClients ?? 2000}</clients>
    <sources>${o.maxSources ?? 100}</sources>
    <queue-size>524288</queue-size>
    <client-timeout>30</client-timeout>
    <header-timeout>15</header-timeout>
    <source-timeout>10</source-timeout>
    <burst-on-connect>1</burst-on-connect>
    <burst-size>65536</burst-size>
  </limits>
  <authentication>
    <!-- Required by Icecast, used by nobody: sources sign in as their transmitter (stream_auth below). -->
    <source-password>${x(o.sourcePassword ?? randomPassword())}</source-password>
    <relay-password>${x(randomPassword())}</relay-password>
    <admin-user>${x(o.adminUser)}</admin-user>
    <admin-password>${x(o.adminPassword)}</admin-password>
  </authentication>
  <!-- Listeners' addresses carry their lease: on 127.0.0.1 (the default) only a TLS reverse proxy at ICECAST_URL
       reaches Icecast, so a lease never crosses a network in the clear (docs/operator.md, "Audio: Icecast"). -->
  <listen-socket>
    <port>${o.port}</port>
    <bind-address>${x(o.bindAddress)}</bind-address>
  </listen-socket>
  <!-- No mount-name: a default mount governs every mount (2.4.4 warns that a mount-name here is unsupported).
       Minaret admits only /m/<mosque id>; any other path, / included, is refused.
       The username/password pair is sent as HTTP basic on every callback: Minaret refuses a callback without it
       (no comment inside <authentication>: Icecast reads each child there as an option). -->
  <mount type="default">
    <authentication type="url">
${ACTIONS.map((a) => `      <option name="${a}" value="${x(hook(a))}"/>`).join('\n')}
      <option name="username" value="${HOOK_USER}"/>
      <option name="password" value="${x(o.hookSecret)}"/>
      <option name="auth_header" value="icecast-auth-user: 1"/>
      <option name="timelimit_header" value="icecast-auth-timelimit:"/>
    </authentication>
  </mount>
  <fileserve>0</fileserve>
  <paths>
    <basedir>/usr/share/icecast2</basedir>
    <logdir>${x(o.logDir)}</logdir>
    <webroot>/usr/share/icecast2/web</webroot>
    <adminroot>/usr/share/icecast2/admin</adminroot>
  </paths>
  <logging>
    <accesslog>access.log</accesslog>
    <errorlog>error.log</errorlog>
    <loglevel>3</loglevel>
    <logsize>10000</logsize>
  </logging>
  <security>
    <chroot>0</chroot>${owner}
  </security>
</icecast>
`;
}
