import { test } from 'node:test';
import assert from 'node:assert/strict';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import type { Page } from 'playwright-core';
import { API, joinMosque, member, setStatus } from '../support/people.ts';
import { mosqueWithOwner, registerPlayer, registerTransmitter } from '../support/devices.ts';
import { audioToolsMissing } from '../audio/icecast-plain.ts';
import { audioWorld } from '../audio/icecast.ts';
import { signedInAdminPage } from '../console/browser.ts';
import { deviceLine, measure, readWav, secondsAt, startDevice } from './support.ts';

// The whole audio path from the console (docs/console.md; docs/devices/raspberry-pi.md): the mosque's owner, in
// Chromium, presses Start broadcast on the mosque's page; broadcast_start reaches the real `minaret-device run
// --input tone` transmitter, which sends ffmpeg's 440 Hz tone to its Icecast mount as the source; the real player
// hears the start on its mosque's topic, plays its stream_url through ffmpeg into its WAV output, and stops on Stop
// broadcast, pressed in the console too, and again when the owner bans its member on the member's page (a config
// without stream_url and lease). Starting over the API is the same route the console calls (test/e2e/broadcasts.test.ts).

const missing = audioToolsMissing();
const skip = missing ? `skipped: ${missing}` : false;

/** The tone is in the player's file within this of the click on Start broadcast. */
const HEARD_WITHIN_S = 2;
/**
 * The player plays nothing new later than this after the API answered a stop or a ban. Measured against how far
 * the WAV had got when the answer came, not against the answer's wall time: on connect Icecast sends ahead up to
 * its burst-size (16384 bytes in test/audio/icecast-plain.ts, about 2 s of the transmitter's 64 kbit/s MP3), which
 * the WAV queues as a sound card buffers it (device/audio/wav.ts), so the file runs that far ahead of the clock.
 * Audio already in the file at the answer had already been delivered; everything after it must end within 1 s.
 */
const STOPPED_WITHIN_S = 1;
const LOUD = 1000;

test('the owner presses Start in the console and the transmitter\'s tone is in the player\'s output within 2 s; Stop and a ban in the console silence it within 1 s', { skip, timeout: 180_000 }, async (t) => {
  // The audio gate on, as an operator runs it (docs/operator.md#audio-icecast): Icecast as `minaret icecast-config`
  // prints it tells Minaret when the source is on air, so the players' start waits for it (docs/api.md, "Broadcasts
  // and the audio server") rather than racing the transmitter to an empty mount and retrying a second later.
  const { ts } = await audioWorld(t, { env: { STREAM_HTTP_HOSTS: '127.0.0.1' } });
  const { owner, mosque } = await mosqueWithOwner(ts, { name: 'Masjid Al-Huda' }, 'imam@console-audio.test');
  const tx = await registerTransmitter(ts, owner.token, mosque.id);
  const listener = await member(ts, 'listener@console-audio.test');
  const membership = await joinMosque(ts, listener, mosque.id);
  await setStatus(ts, owner.token, membership.id, 'approved');
  const player = await registerPlayer(ts, listener, mosque.id);

  const wav = path.join(os.tmpdir(), `minaret-console-audio-${process.pid}.wav`);
  const txWav = path.join(os.tmpdir(), `minaret-console-audio-tx-${process.pid}.wav`);
  t.after(() => [wav, txWav].forEach((f) => fs.rmSync(f, { force: true })));
  const txRun = startDevice(t, tx, ts.url, ['--input', 'tone', '--output', txWav]).run;
  const playerRun = startDevice(t, player, ts.url, ['--output', wav]).run;
  await deviceLine(txRun, /CONNECTING -> ONLINE \(connected\)/, 20_000);
  await deviceLine(playerRun, /-> ONLINE \((connected|entitled)\)/, 20_000);
  /** Seconds of the WAV's timeline at a wall-clock time (the timeline starts at the device's first line). */
  const wavS = (wallMs: number) => (wallMs - Date.parse(/^(\S+) minaret-device /m.exec(playerRun.stdout())![1]!)) / 1000;
  /** How far the WAV has got now, in seconds: its own length, or the clock where nothing was written since. */
  const wavReach = (wallMs: number) => Math.max(wavS(wallMs), (fs.statSync(wav).size - 44) / 2 / 22_050);

  const { page } = await signedInAdminPage(t, ts, owner, { path: `/mosques/${mosque.id}` });
  await page.getByRole('heading', { name: 'Masjid Al-Huda' }).waitFor();
  await page.getByText('Updating live').waitFor();

  // Start: the click's wall time against the WAV's timeline.
  const click1 = wavS(await startInConsole(page));
  await deviceLine(txRun, /ONLINE -> PLAYING \(broadcast_start\)/, 20_000);
  await deviceLine(playerRun, /ONLINE -> PLAYING \(broadcast_start\)/, 20_000);
  await new Promise((r) => setTimeout(r, 4000));

  // Stop, in the console.
  const stop = await answered(page, /\/broadcasts\/[^/]+\/stop$/, 'POST', () => page.locator('li[data-broadcast]').getByRole('button', { name: 'Stop broadcast' }).click());
  assert.equal(stop.status, 200);
  const stopReach = wavReach(stop.at);
  // The transmitter's source ends with the stop, so the player may lose its stream just before the stop event.
  await deviceLine(playerRun, /PLAYING -> ONLINE \((broadcast_stop|stream_lost)\)/, 10_000);
  await deviceLine(playerRun, /closed http\S+ after \d+ audio bytes/, 10_000);
  await deviceLine(txRun, /PLAYING -> ONLINE \(broadcast_stop\)/, 10_000);
  await page.locator('li[data-broadcast] .badge', { hasText: 'Stopped' }).waitFor();
  await new Promise((r) => setTimeout(r, 3000));

  // A second broadcast from the console, and the member banned on their page while it plays.
  const mark = playerRun.stdout().length;
  const click2 = wavS(await startInConsole(page));
  await deviceLine(playerRun, /ONLINE -> PLAYING \(broadcast_start\)/, 20_000, mark);
  await page.getByRole('link', { name: 'Members', exact: true }).click();
  await page.getByRole('link', { name: listener.email }).click();
  await page.locator('[data-actions]').getByRole('button', { name: 'Ban', exact: true }).click();
  await new Promise((r) => setTimeout(r, 2000));
  const ban = await answered(page, /\/memberships\/[^/]+$/, 'PATCH', () => page.getByRole('button', { name: 'Yes, ban' }).click());
  assert.equal(ban.status, 200);
  const banReach = wavReach(ban.at);
  const banS = wavS(ban.at);
  await deviceLine(playerRun, /PLAYING -> UNBOUND/, 10_000);
  await page.locator('[data-status="banned"]').waitFor();
  await new Promise((r) => setTimeout(r, 3000));
  playerRun.child.kill('SIGTERM');
  assert.equal((await playerRun.exited).code, 0, playerRun.stderr());

  const out = playerRun.stdout();
  const audio = readWav(wav);
  const seconds = audio.samples.length / audio.rate;
  const loudAt = (fromS: number, toS: number) => {
    const from = Math.max(0, Math.floor(fromS * audio.rate));
    const to = Math.min(audio.samples.length, Math.floor(toS * audio.rate));
    let first = -1;
    let last = -1;
    for (let i = from; i < to; i++) {
      if (Math.abs(audio.samples[i]!) <= LOUD) continue;
      if (first < 0) first = i;
      last = i;
    }
    return first < 0 ? null : { first: first / audio.rate, last: last / audio.rate };
  };

  // Nothing before the first click; the tone within HEARD_WITHIN_S of it, 440 Hz and loud.
  assert.equal(measure(audio, 0, click1).rms, 0, 'silence before Start');
  const first = loudAt(click1, click2);
  assert.ok(first, 'the tone reached the player\'s output');
  const heardS = first.first - click1;
  console.log(`# click on Start -> first loud sample: ${heardS.toFixed(2)} s (goal <= ${HEARD_WITHIN_S} s)`);
  assert.ok(heardS >= 0 && heardS <= HEARD_WITHIN_S, `the tone ${heardS.toFixed(2)} s after the click at ${click1.toFixed(2)} s\n--- player\n${out.slice(0, 4000)}\n--- transmitter\n${txRun.stdout().slice(0, 3000)}`);
  const onAir = loudestHalfSecond(audio, first.first, first.first + 3);
  assert.ok(onAir.rms > LOUD, `the tone is loud on air: rms ${onAir.rms.toFixed(0)}`);
  assert.ok(Math.abs(onAir.hz - 440) < 15, `the transmitter's 440 Hz tone: ${onAir.hz.toFixed(1)} Hz`);

  // After Stop: the last loud sample within STOPPED_WITHIN_S of what the file held at the answer, then silence
  // until the second click.
  const stopLead = stopReach - wavS(stop.at);
  console.log(`# Stop: the WAV ran ${stopLead.toFixed(2)} s ahead of the clock at the answer; tone ended ${(first.last - stopReach).toFixed(2)} s past that`);
  assert.ok(first.last <= stopReach + STOPPED_WITHIN_S, `the tone ends within ${STOPPED_WITHIN_S} s of the stop: its last loud sample at ${first.last.toFixed(2)} s, the file at ${stopReach.toFixed(2)} s at the answer`);
  assert.equal(measure(audio, stopReach + STOPPED_WITHIN_S, click2).rms, 0, `silence after the stop until the second Start (${stopReach.toFixed(1)} s to ${click2.toFixed(1)} s)`);
  assert.ok(click2 - stopReach > 2, 'a stretch of silence to look at');

  // The second broadcast played, then the ban: nothing loud past STOPPED_WITHIN_S of the answer, silence to the end.
  const second = loudAt(click2, seconds);
  assert.ok(second && second.first - click2 <= HEARD_WITHIN_S, `the second broadcast heard within ${HEARD_WITHIN_S} s: ${second ? (second.first - click2).toFixed(2) : 'never'}`);
  console.log(`# ban: the WAV ran ${(banReach - banS).toFixed(2)} s ahead of the clock at the answer; tone ended ${(second.last - banReach).toFixed(2)} s past that`);
  assert.ok(second.last <= banReach + STOPPED_WITHIN_S, `the ban stops the tone within ${STOPPED_WITHIN_S} s: its last loud sample at ${second.last.toFixed(2)} s, the file at ${banReach.toFixed(2)} s at the answer`);
  assert.ok(seconds > banReach + 2, `the file runs past the ban: ${seconds.toFixed(1)} s, ban at ${banS.toFixed(1)} s`);
  assert.equal(measure(audio, banReach + STOPPED_WITHIN_S, seconds).rms, 0, 'silence after the ban');
  // The device's own account agrees with the file.
  assert.ok(secondsAt(out, /PLAYING -> UNBOUND/) - banS <= STOPPED_WITHIN_S, 'UNBOUND within 1 s of the ban\'s answer');
  assert.doesNotMatch(out, /lease=ey|eyJ[\w-]+\.[\w-]+\.[\w-]+/, 'the lease is never printed');
});

/** Chooses the azaan at maghrib and presses Start broadcast; the click's wall time, once the API answered 201. */
async function startInConsole(page: Page): Promise<number> {
  await page.getByLabel('What').selectOption('azaan');
  await page.getByLabel('Prayer').selectOption('maghrib');
  const res = await answered(page, /\/broadcasts$/, 'POST', () => page.getByRole('button', { name: 'Start broadcast' }).click());
  assert.equal(res.status, 201);
  await page.locator('li[data-broadcast] .badge', { hasText: 'Live' }).waitFor();
  return res.clickedAt;
}

/** Does `act` and waits for the browser's API call it makes; when it was clicked and answered (wall clock), and the status. */
async function answered(page: Page, url: RegExp, method: string, act: () => Promise<void>) {
  const answer = page.waitForResponse((r) => url.test(new URL(r.url()).pathname) && r.request().method() === method);
  const clickedAt = Date.now();
  await act();
  const res = await answer;
  return { clickedAt, at: Date.now(), status: res.status() };
}

/** The loudest 0.5 s window between `fromS` and `toS` (steps of 0.1 s): a loaded machine may leave a gap in the WAV. */
function loudestHalfSecond(audio: ReturnType<typeof readWav>, fromS: number, toS: number) {
  let best = measure(audio, fromS, fromS + 0.5);
  for (let at = fromS + 0.1; at + 0.5 <= toS; at += 0.1) {
    const m = measure(audio, at, at + 0.5);
    if (m.rms > best.rms) best = m;
  }
  return best;
}
