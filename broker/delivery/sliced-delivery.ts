/**
 * Gets a broadcast to its first players soon after the POST (bench/RESULTS.md, "First player: sliced
 * delivery"). aedes hands a publish to its emitter, which calls every matching subscription's delivery in
 * one synchronous walk; each delivery copies the packet, asks authorizeForward and queues its socket write
 * in a setImmediate of its own. No subscriber is written
 * to before the walk has passed all of them: for 10,000 players of one mosque the walk alone took 37-100 ms
 * on the bench host (bench/RESULTS.md, "Broadcasts"), in bare aedes too.
 *
 * Here the walk is cut in two: the first FIRST_SLICE deliveries of a publish run in the walk as before, the
 * rest wait in a queue of their topic and are made together in a setImmediate queued behind the writes of
 * the first ones. The emitter still calls one function per subscription in its walk, but past the first
 * slice that function only queues the delivery (3-5 ms per 10,000 on the bench host, against 37-100 ms for
 * aedes's deliveries). So the first players are written to after FIRST_SLICE deliveries instead of all of
 * them, and the others one turn of the event loop later than before. Slices of doubling size (64, 128, 256,
 * ...) were tried: between slices the broker read the PUBACKs of the players already served, and the later
 * players heard the start later (p50 over 10,000: 357-847 ms against 216-746 ms without slicing, on the same
 * shared host), so the rest goes in one piece. In Redis mode the walk is the one each process makes when the
 * message comes back from Redis, so it is cut the same way.
 *
 * What stays as it was:
 * - Who receives: the emitter still matches the subscriptions when the publish comes, so a subscription made
 *   later gets the retained copy on SUBSCRIBE, not the live one too. authorizeForward is asked when the
 *   delivery runs, so entitlement lost meanwhile (a ban) stops the deliveries still queued.
 * - Order: [MQTT-4.6.0-6] every topic is an ordered topic. Once a topic has deliveries queued, every later
 *   delivery on that topic queues behind them, so each subscriber gets that topic's messages in the order they
 *   were published; other topics (configs, commands) are not held up by a fan-out.
 * - Completion: each delivery still calls its callback once aedes has written it, so a publish completes (its
 *   promise in DeviceLink resolves) after the last delivery, as before.
 */

/** An mqemitter listener: aedes's delivery of one subscription. */
type Notify = (this: unknown, message: { topic: string }, done: () => void) => void;

/** The part of an mqemitter (memory or Redis) this wraps: aedes registers and removes its subscriptions here. */
export interface SubscriptionEmitter {
  on(topic: string, notify: Notify, done?: () => void): unknown;
  removeListener(topic: string, notify: Notify, done?: () => void): unknown;
}

/**
 * Deliveries of a publish made in its walk; 64 of aedes's deliveries take ~0.2-0.6 ms here, so the first
 * players are written to about that long after the broker has the event.
 */
export const FIRST_SLICE = 64;

/** Deliveries of one publish that wait for their slice: aedes's deliveries of the subscriptions still to walk. */
interface Waiting {
  message: { topic: string };
  self: unknown;
  done: () => void;
  notifies: Notify[];
}

/** A topic's waiting deliveries, oldest publish first. */
interface TopicQueue {
  publishes: Waiting[];
  /** What runs once the queue is empty and the writes of its deliveries are done (afterDeliveries). */
  after: Array<() => void>;
}

export interface SlicedDelivery<E> {
  /** The emitter to hand aedes (`mq`): the one given, its listeners wrapped. */
  emitter: E;
  /**
   * Runs `fn` once every delivery on `topic` made or waiting now has been made, and the socket writes
   * aedes queued for them have run: after a fan-out's second slice, or (nothing waiting) after the writes
   * already queued. A publish reaches this emitter after a few promise steps of aedes (the retained store),
   * so call this from a later turn than the publish, e.g. a setImmediate.
   */
  afterDeliveries(topic: string, fn: () => void): void;
}

/** Wraps the emitter's listeners in place (memory or Redis alike). */
export function sliceDeliveries<E extends SubscriptionEmitter>(emitter: E, firstSlice = FIRST_SLICE): SlicedDelivery<E> {
  const on = emitter.on.bind(emitter);
  const removeListener = emitter.removeListener.bind(emitter);
  // aedes removes a subscription with the function it registered: find the wrapper given for it. One
  // wrapper per function serves every topic it is registered on (it reads the topic from the message).
  const wrappers = new WeakMap<Notify, Notify>();
  const queues = new Map<string, TopicQueue>();
  // The walk in progress: mqemitter calls a publish's listeners one after the other, synchronously.
  let walking: object | null = null;
  let walked = 0;

  function drain(topic: string, queue: TopicQueue): void {
    // A publish on this topic that comes while these are made (none does: aedes's deliveries only queue
    // writes) would still go behind them.
    for (let i = 0; i < queue.publishes.length; i++) {
      const w = queue.publishes[i]!;
      for (const notify of w.notifies) notify.call(w.self, w.message, w.done);
    }
    queues.delete(topic);
    // Queued behind the writes of the deliveries just made.
    for (const fn of queue.after) setImmediate(fn);
  }

  /** Adds one delivery behind the topic's waiting ones (one entry per publish, one function per subscriber). */
  function wait(queue: TopicQueue, notify: Notify, self: unknown, message: { topic: string }, done: () => void): void {
    const last = queue.publishes[queue.publishes.length - 1];
    if (last && last.message === message && last.done === done) last.notifies.push(notify);
    else queue.publishes.push({ message, self, done, notifies: [notify] });
  }

  function wrap(notify: Notify): Notify {
    return function sliced(this: unknown, message, done) {
      const topic = message.topic;
      const waiting = queues.get(topic);
      if (waiting) return wait(waiting, notify, this, message, done);
      if (message !== walking) {
        walking = message;
        walked = 0;
      }
      if (++walked <= firstSlice) return notify.call(this, message, done);
      const queue: TopicQueue = { publishes: [], after: [] };
      wait(queue, notify, this, message, done);
      queues.set(topic, queue);
      // Queued after the setImmediate writes of the deliveries made so far: those reach their sockets first.
      setImmediate(drain, topic, queue);
    };
  }

  emitter.on = (topic, notify, done) => {
    let wrapped = wrappers.get(notify);
    if (!wrapped) wrappers.set(notify, (wrapped = wrap(notify)));
    return on(topic, wrapped, done);
  };
  emitter.removeListener = (topic, notify, done) => removeListener(topic, wrappers.get(notify) ?? notify, done);
  return {
    emitter,
    afterDeliveries(topic, fn) {
      const queue = queues.get(topic);
      if (queue) queue.after.push(fn);
      else setImmediate(fn);
    },
  };
}
