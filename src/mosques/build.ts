import type { Clock } from '../platform/clock.ts';
import type { Store } from '../platform/store/store.ts';
import type { ChangePublisher } from '../platform/changes.ts';
import type { Notifier, PageUrl } from '../platform/notify.ts';
import type { UserStore } from '../people/users.ts';
import { createActivityLog } from './activity.ts';
import { createMosqueStore } from './mosques.ts';
import { createAdminStore } from './admins.ts';
import { createMemberships } from './memberships.ts';
import { createAddressGrants } from './address-grants.ts';
import { createInvites } from './invites.ts';

/** Mosques, their admins, memberships and invites, and the activity feed (docs/api.md, "Mosques"). */
export function buildMosques(p: { store: Store; clock: Clock; changes: ChangePublisher; users: UserStore; notifier: Notifier; pageUrl: PageUrl }) {
  const { store, clock, changes, users } = p;
  const activity = createActivityLog(store, clock);
  const mosques = createMosqueStore(store, clock, changes);
  const admins = createAdminStore(store, clock, users, changes);
  const memberships = createMemberships({ store, clock, activity, users, changes });
  const grants = createAddressGrants({ store, clock, activity, memberships, admins });
  const invites = createInvites({ store, clock, users, memberships, grants, activity, notifier: p.notifier, pageUrl: p.pageUrl });
  return { activity, mosques, admins, memberships, grants, invites };
}

export type Mosques = ReturnType<typeof buildMosques>;
