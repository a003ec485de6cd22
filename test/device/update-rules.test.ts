import { test } from 'node:test';
import assert from 'node:assert/strict';
import { isOwnServer, sameVersion } from '../../device/contract/update.ts';
import { hwRevOf } from '../../device/board.ts';
import { HW_REV } from '../../src/devices/device-config.ts';

// The device's rules for an update command (device/contract/update.ts), table by table; the real device that applies
// them is test/device/update.test.ts.

// docs/firmware.md, "4.4": the origins a device sends its MQTT username and password to as HTTP Basic.
const OWN = { origins: ['https://minaret.example.org', 'https://api.minaret.example.org:8443/api/v1', 'not a url'], brokerUrl: 'mqtts://broker.minaret.example.org:8883' };
const download = '/api/v1/firmware/images/img-1/download';
const servers: Array<[string, string, boolean]> = [
  ['the base it paired with', `https://minaret.example.org${download}`, true],
  ['its api_url\'s origin', `https://api.minaret.example.org:8443${download}`, true],
  ['its broker\'s host on another port, over https', `https://broker.minaret.example.org:9443${download}`, true],
  ['its broker\'s host in clear while the broker is mqtts', `http://broker.minaret.example.org${download}`, false],
  ['the base\'s host in clear', `http://minaret.example.org${download}`, false],
  ['the api_url\'s host on another port', `https://api.minaret.example.org${download}`, false],
  ['another host', `https://evil.example${download}`, false],
  ['a host that starts with the server\'s', `https://minaret.example.org.evil.example${download}`, false],
  ['the server\'s name as userinfo', `https://minaret.example.org@evil.example${download}`, false],
  ['not http', `ftp://minaret.example.org${download}`, false],
  ['not a URL', 'minaret.example.org/download', false],
];
for (const [what, url, own] of servers) {
  test(`a device ${own ? 'downloads from' : 'sends no credentials to'} ${what}`, () => assert.equal(isOwnServer(url, OWN), own));
}
test('a device whose broker is plain mqtt downloads from any port of its host, and from nowhere else', () => {
  const plain = { origins: [], brokerUrl: 'mqtt://10.0.0.5:1883' };
  assert.equal(isOwnServer(`http://10.0.0.5:8080${download}`, plain), true);
  assert.equal(isOwnServer(`http://10.0.0.6:8080${download}`, plain), false);
});

// Semantic Versioning 2.0.0 §10-11: build metadata does not make another release; a pre-release does.
const versions: Array<[string, string, boolean]> = [
  ['2.0.0', '2.0.0', true],
  ['2.0.0', '2.0.0+build.7', true],
  ['2.0.0+a', '2.0.0+b', true],
  ['v2.0.0', '2.0.0', true],
  ['minaret-sp-sim/1.0.0+x', 'minaret-sp-sim/1.0.0', true],
  ['2.0.0', '2.0.0-rc.1', false],
  ['2.0.0-rc.1+a', '2.0.0-rc.1', true],
  ['2.0.0', '2.0.1', false],
  ['2.0.0', '2.0', false],
  ['minaret-sp-sim/1.0.0', '1.0.0', false],
  ['nightly', 'nightly', true],
  ['nightly+1', 'nightly+2', false],
];
for (const [a, b, same] of versions) {
  test(`${a} and ${b} are ${same ? 'the same release' : 'different releases'}`, () => {
    assert.equal(sameVersion(a, b), same);
    assert.equal(sameVersion(b, a), same);
  });
}

// The hw_rev minaret-device reports (docs/devices/raspberry-pi.md, "Firmware updates"): one the service records.
const models: Array<[string, string | null]> = [
  ['Raspberry Pi 4 Model B Rev 1.4', 'Raspberry-Pi-4-Model-B-Rev-1.4'],
  ['Linux x64', 'Linux-x64'],
  ['B2', 'B2'],
  ['  Orange Pi (Zero 2W)  ', 'Orange-Pi-Zero-2W'],
  ['Ω ∞', null],
  ['x'.repeat(80), 'x'.repeat(64)],
];
for (const [model, hwRev] of models) {
  test(`the board model ${JSON.stringify(model)} is reported as hw_rev ${JSON.stringify(hwRev)}`, () => {
    assert.equal(hwRevOf(model), hwRev);
    if (hwRev !== null) assert.match(hwRev, HW_REV);
  });
}
