#!/usr/bin/env bash
# The README's walk-through, as one script that really runs: from an empty service to a member hearing a
# broadcast at home, and a support person diagnosing the player. Every variable is set here; every secret
# (the superadmin's OTP) is read from the service's log, where the development `console` transport prints
# outgoing messages. The README's blocks are taken from this file; test/e2e/walkthrough.test.ts runs it.
#
# Needs: curl, jq, openssl, sha256sum, mosquitto_sub (apt-get install mosquitto-clients), node.
#
#   npm start > minaret.log &                               # a fresh service, console transport (the default)
#   MINARET_LOG=minaret.log bash scripts/walkthrough.sh
#
# Settings (environment):
#   MINARET_URL     the service (default http://127.0.0.1:8080)
#   MINARET_LOG     the file the service's stdout goes to (required: the OTP is read from it)
#   DATABASE_PATH   the service's database, for the operator CLI (default data/minaret.db)
#   WORK_DIR        where device credentials are kept, mode 0600 (default .minaret/walkthrough, git-ignored)
set -euo pipefail
cd "$(dirname "$0")/.."

URL=${MINARET_URL:-http://127.0.0.1:8080}
H=$URL/api/v1
LOG=${MINARET_LOG:?set MINARET_LOG to the file the service logs to}
WORK=${WORK_DIR:-.minaret/walkthrough}
mkdir -p "$WORK" && chmod 700 "$WORK"
umask 077
PIDS=()
trap 'for p in "${PIDS[@]}"; do kill -INT "$p" 2>/dev/null || true; done; wait 2>/dev/null || true' EXIT

step() { printf '\n== %s\n' "$*"; }
ok() { printf 'ok: %s\n' "$*"; }
fail() { printf 'FAILED: %s\n' "$*" >&2; exit 1; }
sha() { printf '%s' "$1" | sha256sum | cut -c1-64; }
# POST/GET/PATCH with an optional token; prints the body; fails on an unexpected status.
api() {
  local method=$1 path=$2 token=$3 body=${4:-} want=${5:-2..} out status
  out=$(mktemp)
  status=$(curl -s -o "$out" -w '%{http_code}' -X "$method" "$H$path" \
    ${token:+-H "authorization: Bearer $token"} ${body:+-H 'content-type: application/json' -d "$body"})
  [[ $status =~ ^$want$ ]] || { cat "$out" >&2; rm -f "$out"; fail "$method $path answered $status, wanted $want"; }
  cat "$out"; rm -f "$out"
}
# Polls until a jq expression over GET $2 is true (10 s).
until_true() {
  local what=$1 path=$2 token=$3 expr=$4
  for _ in $(seq 1 50); do
    api GET "$path" "$token" | jq -e "$expr" >/dev/null 2>&1 && { ok "$what"; return; }
    sleep 0.2
  done
  api GET "$path" "$token" >&2; fail "$what"
}
# The newest outgoing message of a purpose to an address, from the service's log (console transport).
last_message() {
  local purpose=$1 to=$2
  for _ in $(seq 1 50); do
    local line
    line=$(grep -F "\"purpose\":\"$purpose\"" "$LOG" | grep -F "\"to\":\"$to\"" | tail -1 || true)
    [ -n "$line" ] && { printf '%s' "$line"; return; }
    sleep 0.2
  done
  fail "no $purpose message to $to in $LOG"
}

step "0. The service answers"
for _ in $(seq 1 150); do curl -sf "$URL/healthz" 2>/dev/null | jq -e '.status == "ok"' >/dev/null 2>&1 && break; sleep 0.2; done
curl -sf "$URL/healthz" | jq -e '.status == "ok"' >/dev/null || fail "GET /healthz is not ok after 30 s"
ok "healthz"

step "1. The operator creates the superadmin (password on standard input, never in argv)"
ROOT_EMAIL=root@walkthrough.example
ROOT_PASSWORD='a long root password'
printf '%s\n' "$ROOT_PASSWORD" | node --import tsx cli/index.ts superadmin create --email "$ROOT_EMAIL"

step "2. The superadmin signs in with two steps; the OTP never leaves this shell"
SESSION=$(api POST /auth/superadmin-2fa "" \
  "{\"identifier_hash\":\"$(sha $ROOT_EMAIL)\",\"password_hash\":\"$(sha "$ROOT_PASSWORD")\"}" | jq -r .session_token)
OTP=$(last_message superadmin_otp "$ROOT_EMAIL" | jq -r .code)
TS=$(date +%s)
HMAC=$(printf '%s|%s' "$OTP" "$TS" | openssl dgst -sha256 -hmac "$SESSION" | awk '{print $NF}')
ROOT=$(api POST /auth/superadmin-2fa/verify "" \
  "{\"session_token\":\"$SESSION\",\"timestamp\":$TS,\"hmac\":\"$HMAC\"}" | jq -r .access_token)
ok "superadmin token"

step "3. The imam and a member sign up (each answer carries a token at once)"
OWNER=$(api POST /auth/signup "" "{\"email\":\"imam@walkthrough.example\",\"password_hash\":\"$(sha 'the imam password')\"}" 201 | jq -r .access_token)
OWNER_ID=$(api GET /me "$OWNER" | jq -r .user.id)
MEMBER=$(api POST /auth/signup "" "{\"email\":\"amina@walkthrough.example\",\"password_hash\":\"$(sha 'a long password')\"}" 201 | jq -r .access_token)
ok "imam $OWNER_ID and a member signed up"

step "4. The superadmin creates the mosque, owned by the imam (who becomes an approved member of it)"
MOSQUE_JSON=$(api POST /mosques "$ROOT" \
  "{\"name\":\"Masjid Al-Noor\",\"timezone\":\"Europe/Oslo\",\"owner_user_id\":\"$OWNER_ID\",\"stream_url\":\"https://radio.example/noor\"}" 201)
MOSQUE=$(jq -r .id <<<"$MOSQUE_JSON")
JOIN_CODE=$(jq -r .join_code <<<"$MOSQUE_JSON")
ok "mosque $MOSQUE, join code $JOIN_CODE"

step "5. The imam registers the mosque's transmitter; its retained config is read over MQTT"
api POST "/mosques/$MOSQUE/devices" "$OWNER" '{"kind":"transmitter","name":"main hall"}' 201 > "$WORK/transmitter.json"
TX=$(jq -r .device.id "$WORK/transmitter.json")
TX_PW=$(jq -r .credentials.password "$WORK/transmitter.json")
MQTT_HOST=$(jq -r .credentials.mqtt_url "$WORK/transmitter.json" | sed -E 's#^mqtt://([^:/]+):([0-9]+).*#\1#')
MQTT_PORT=$(jq -r .credentials.mqtt_url "$WORK/transmitter.json" | sed -E 's#^mqtt://([^:/]+):([0-9]+).*#\2#')
mosquitto_sub -h "$MQTT_HOST" -p "$MQTT_PORT" -i "$TX" -u "$TX" -P "$TX_PW" -t "devices/$TX/config" -C 1 -W 5 \
  | jq -e '.v == "1.0" and .heartbeat_secs == 60' >/dev/null || fail "the transmitter's config"
ok "transmitter $TX reads its config (heartbeat_secs 60)"
jq -n --arg id "$TX" --arg pw "$TX_PW" --arg url "mqtt://$MQTT_HOST:$MQTT_PORT" \
  '[{id: $id, kind: "transmitter", password: $pw, mqtt_url: $url}]' > "$WORK/transmitter-creds.json"
node --import tsx simulator/index.ts --credentials "$WORK/transmitter-creds.json" > "$WORK/transmitter.log" 2>&1 &
PIDS+=($!)
until_true "the transmitter is ONLINE" "/devices/$TX" "$OWNER" '.status == "ONLINE"'

step "6. The member joins with the code on the notice board: pending until an admin approves"
MEMBERSHIP=$(api POST /join "$MEMBER" "{\"code\":\"$JOIN_CODE\"}" 201 | jq -r 'select(.status == "pending") | .id')
[ -n "$MEMBERSHIP" ] || fail "the membership is not pending"
ok "membership $MEMBERSHIP is pending"

step "7. The member plugs in a stream player at home: connected, but UNBOUND (awaiting approval)"
api POST /devices "$MEMBER" "{\"kind\":\"stream_player\",\"mosque_id\":\"$MOSQUE\",\"name\":\"kitchen\"}" 201 > "$WORK/player.json"
PLAYER=$(jq -r .device.id "$WORK/player.json")
jq '[{id: .device.id, kind: .device.kind, password: .credentials.password, mqtt_url: .credentials.mqtt_url}]' \
  "$WORK/player.json" > "$WORK/player-creds.json"
node --import tsx simulator/index.ts --credentials "$WORK/player-creds.json" > "$WORK/player.log" 2>&1 &
PIDS+=($!)
until_true "the player is UNBOUND" "/devices/$PLAYER" "$MEMBER" '.status == "UNBOUND"'
api GET "/devices/$PLAYER/why" "$MEMBER" | jq -e '.effective_playback_state == "unbound" and .deciding_field == "membership.status" and .reason == "awaiting_approval"' >/dev/null \
  || fail "why should say: awaiting approval"
ok "why: unbound, membership.status, awaiting_approval"

step "8. The imam approves the member: the player gets the stream and a lease at once"
api GET "/mosques/$MOSQUE/memberships?status=pending" "$OWNER" | jq -e --arg m "$MEMBERSHIP" 'map(.id) | index($m) != null' >/dev/null \
  || fail "the pending list shows the member"
api PATCH "/memberships/$MEMBERSHIP" "$OWNER" '{"status":"approved"}' | jq -e '.status == "approved"' >/dev/null
until_true "the player is ONLINE (entitled)" "/devices/$PLAYER" "$MEMBER" '.status == "ONLINE" and .entitlement.entitled == true'

step "9. The member turns off waaz notifications (only the notify_* toggles are theirs)"
api PATCH "/memberships/$MEMBERSHIP" "$MEMBER" '{"notify_waaz":false}' | jq -e '.notify_waaz == false' >/dev/null
api PATCH "/memberships/$MEMBERSHIP" "$MEMBER" '{"status":"approved"}' 403 >/dev/null
ok "toggle changed; the member's own status change is 403"

step "10. The imam starts the Maghrib azaan: the transmitter and the member's player play it"
BROADCAST=$(api POST "/mosques/$MOSQUE/broadcasts" "$OWNER" '{"kind":"azaan","prayer":"maghrib"}' 201 | jq -r .id)
until_true "the player is PLAYING at home" "/devices/$PLAYER" "$MEMBER" '.status == "PLAYING"'
until_true "the report counts the transmitter and the player as playing" "/mosques/$MOSQUE/broadcasts/$BROADCAST" "$OWNER" '.report.playing >= 2'
api POST "/mosques/$MOSQUE/broadcasts/$BROADCAST/stop" "$OWNER" "" >/dev/null
until_true "the player is back to ONLINE" "/devices/$PLAYER" "$MEMBER" '.status == "ONLINE"'

step "11. Support: 'the azaan did not play at home' - diagnose the player"
MINARET_URL=$URL MINARET_TOKEN=$OWNER node --import tsx cli/index.ts device diagnose "$PLAYER" | tee "$WORK/diagnose.txt"
grep -q 'ready' "$WORK/diagnose.txt" || fail "diagnose should say the player is ready"
MINARET_URL=$URL MINARET_TOKEN=$OWNER node --import tsx cli/index.ts device timeline "$PLAYER" | tee "$WORK/timeline.txt"
grep -q 'ping ok' "$WORK/timeline.txt" || fail "the timeline names the ping"
api POST "/devices/$PLAYER/commands" "$OWNER" '{"name":"play_test"}' | jq -e '.ok == true' >/dev/null
ok "ping, diag bundle and a test tone answered"

step "12. A ban takes the stream away at once"
api PATCH "/memberships/$MEMBERSHIP" "$OWNER" '{"status":"banned"}' | jq -e '.status == "banned"' >/dev/null
until_true "the player is UNBOUND (membership_lapsed)" "/devices/$PLAYER/why" "$MEMBER" '.reason == "membership_lapsed"'

printf '\nwalk-through complete\n'
