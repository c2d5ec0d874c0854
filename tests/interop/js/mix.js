// A mix of message sizes and body kinds sent by rhea through the mesh, checked where it arrives.
//
//   node mix.js SPEC_JSON        (SPEC_JSON: a file path, or the JSON itself)
//
// SPEC: {send: URL, recv: [URL, ...], address, presettled, credit, timeout_s,
//        messages: [{kind, size} | {kind, encoded}, ...]}
// kinds: data (a data section), binary / string / map (an amqp-value), sequence (an amqp-sequence),
// small (a short string). `size`: the body's payload in bytes; `encoded`: the whole encoded message in
// bytes instead (the payload is fitted to it). Every message carries application property `seq`; its
// payload is derived from (kind, seq, size) so each receiver checks it byte for byte.
// Prints READY once every receiver is attached and waits for a line on stdin before sending; then one
// JSON line: {status: OK | TIMEOUT, sent, outcomes: {accepted: n, ...}, released_seqs,
// receivers: [{got, duplicates, bad, missing}], seconds}. Exits 0 when status is OK.
'use strict';
const fs = require('fs');
const rhea = require('rhea');

const arg = process.argv[2];
const spec = JSON.parse(arg.trim().startsWith('{') ? arg : fs.readFileSync(arg, 'utf8'));
const N = spec.messages.length;
const address = spec.address;
const presettled = !!spec.presettled;

function fill(seq) { return (seq * 7 + 1) & 0xff; }
function letter(seq) { return String.fromCharCode(97 + (seq % 26)); }

function payload(kind, seq, size) {
    switch (kind) {
        case 'data': return rhea.message.data_section(Buffer.alloc(size, fill(seq)));
        case 'binary': return Buffer.alloc(size, fill(seq));
        case 'string': return letter(seq).repeat(size);
        case 'map': return { seq: seq, blob: Buffer.alloc(size, fill(seq)) };
        case 'sequence': return rhea.message.sequence_section([seq, Buffer.alloc(size, fill(seq))]);
        case 'small': return `small #${seq}`;
        default: throw new Error(`unknown kind ${kind}`);
    }
}

function message(m, seq, size) {
    return { application_properties: { seq: seq, kind: m.kind, size: size }, body: payload(m.kind, seq, size) };
}

// the payload size that makes the encoded message exactly `encoded` bytes (encodings grow by steps)
function fitted(m, seq) {
    if (m.encoded === undefined) return m.size || 0;
    let size = Math.max(0, m.encoded - 200);
    for (let i = 0; i < 8; i++) {
        const got = rhea.message.encode(message(m, seq, size)).length;
        if (got === m.encoded) return size;
        size = Math.max(0, size + (m.encoded - got));
    }
    throw new Error(`cannot fit ${m.kind} to ${m.encoded} encoded bytes`);
}

const sizes = spec.messages.map((m, seq) => fitted(m, seq));

function allSame(buf, byte) {
    if (!Buffer.isBuffer(buf)) return false;
    for (let i = 0; i < buf.length; i++) if (buf[i] !== byte) return false;
    return true;
}

function check(msg) {
    const ap = msg.application_properties || {};
    const seq = ap.seq, size = sizes[seq], kind = spec.messages[seq] && spec.messages[seq].kind;
    if (kind === undefined || ap.kind !== kind || ap.size !== size) return false;
    const b = msg.body;
    switch (kind) {
        case 'data': return b && b.typecode === 0x75 && b.content.length === size && allSame(b.content, fill(seq));
        case 'binary': return b.length === size && allSame(b, fill(seq));
        case 'string': return typeof b === 'string' && b === letter(seq).repeat(size);
        case 'map': return b.seq === seq && b.blob.length === size && allSame(b.blob, fill(seq));
        case 'sequence': return b && b.typecode === 0x76 && b.content[0] === seq && b.content[1].length === size
            && allSame(b.content[1], fill(seq));
        case 'small': return b === `small #${seq}`;
    }
    return false;
}

const t0 = Date.now();
const container = rhea.create_container({ id: `mix-${process.pid}` });
const receivers = spec.recv.map(() => ({ got: 0, seen: new Set(), duplicates: 0, bad: [] }));
const outcomes = { accepted: 0, released: 0, modified: 0, rejected: 0 };
const releasedSeqs = [];
let sent = 0, opened = 0, finished = false;

function done() {
    const allIn = receivers.every((r) => r.seen.size === N);
    const allSettled = presettled || outcomes.accepted + outcomes.released + outcomes.modified + outcomes.rejected === N;
    return sent === N && allIn && allSettled;
}

function finish(status) {
    if (finished) return;
    finished = true;
    const report = {
        status, sent, outcomes, released_seqs: releasedSeqs.slice(0, 50),
        receivers: receivers.map((r) => {
            const missing = [];
            for (let i = 0; i < N && missing.length < 50; i++) if (!r.seen.has(i)) missing.push(i);
            return { got: r.got, duplicates: r.duplicates, bad: r.bad.slice(0, 50), missing };
        }),
        seconds: (Date.now() - t0) / 1000,
    };
    console.log(JSON.stringify(report));
    process.exit(status === 'OK' ? 0 : 1);
}

function startSending() {
    const sc = container.connect({ host: hostOf(spec.send), port: portOf(spec.send), reconnect: false });
    const opts = { target: { address } };
    if (presettled) opts.snd_settle_mode = 1;
    const snd = sc.open_sender(opts);
    const pump = () => {
        while (sent < N && snd.sendable()) {
            const m = spec.messages[sent];
            const d = snd.send(message(m, sent, sizes[sent]));
            d.seq = sent;
            sent++;
        }
        if (presettled && done()) finish('OK');
    };
    snd.on('sendable', pump);
    const outcome = (name) => (ctx) => {
        outcomes[name]++;
        if (name !== 'accepted' && releasedSeqs.length < 50) releasedSeqs.push(ctx.delivery.seq);
        if (done()) finish('OK');
    };
    snd.on('accepted', outcome('accepted'));
    snd.on('released', outcome('released'));
    snd.on('modified', outcome('modified'));
    snd.on('rejected', outcome('rejected'));
}

function hostOf(url) { return new URL(url).hostname; }
function portOf(url) { return Number(new URL(url).port); }

spec.recv.forEach((url, i) => {
    const rc = container.connect({ host: hostOf(url), port: portOf(url), reconnect: false });
    const rcv = rc.open_receiver({ source: { address }, credit_window: spec.credit || 200 });
    rcv.on('message', (ctx) => {
        const r = receivers[i];
        const seq = (ctx.message.application_properties || {}).seq;
        r.got++;
        if (r.seen.has(seq)) r.duplicates++;
        else r.seen.add(seq);
        if (!check(ctx.message) && r.bad.length < 50) r.bad.push(seq);
        if (done()) finish('OK');
    });
    rcv.on('receiver_open', () => {
        opened++;
        if (opened === spec.recv.length) {       // the caller checks the routes, then says go
            console.log('READY');
            process.stdin.once('data', startSending);
        }
    });
});
setTimeout(() => finish('TIMEOUT'), (spec.timeout_s || 30) * 1000);
