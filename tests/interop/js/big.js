// One side of a large-message transfer with rhea: `node big.js send URL ADDR SIZE COUNT` sends COUNT
// messages of SIZE bytes (a data section) as fast as credit allows and prints {sent, accepted, sha256,
// seconds}; `node big.js recv URL ADDR COUNT` prints READY, receives COUNT messages and prints {received,
// bytes, bad, sha256, seconds}. sha256: of every message's content in turn; bad: messages whose first or
// last byte is not their number.
'use strict';
const crypto = require('crypto');
const rhea = require('rhea');
const [role, url, addr] = process.argv.slice(2, 5);
const u = new URL(url);
const c = rhea.create_container({ id: `big-${role}-${process.pid}` });
// rhea reopens its session window only when a delivery completes: 2,048 transfers (32 MB at 16 KiB frames) is
// the largest message it can take with its default session buffer
const conn = c.connect({ host: u.hostname, port: Number(u.port), reconnect: false, session_buffer_size: { incoming: 1 << 20, outgoing: 2048 } });
const t0 = Date.now();
if (role === 'send') {
    const size = Number(process.argv[5]), count = Number(process.argv[6] || 1);
    let sent = 0, accepted = 0, other = 0;
    const hash = crypto.createHash('sha256');
    const snd = conn.open_sender({ target: { address: addr } });
    const pump = () => {
        while (sent < count && snd.sendable()) {
            const body = Buffer.alloc(size, sent & 0xff);
            body.writeUInt32BE(sent, 0);               // not all one byte: a shifted copy would show
            hash.update(body);
            snd.send({ message_id: sent, body: rhea.message.data_section(body) });
            sent++;
        }
    };
    snd.on('sendable', pump);
    const end = () => { if (accepted + other === count) { console.log(JSON.stringify({ sent, accepted, other, sha256: hash.digest('hex'), seconds: (Date.now() - t0) / 1000 })); conn.close(); } };
    snd.on('accepted', () => { accepted++; end(); });
    for (const o of ['released', 'rejected', 'modified']) snd.on(o, () => { other++; end(); });
} else {
    const count = Number(process.argv[5] || 1);
    let received = 0, bytes = 0, bad = 0;
    const hash = crypto.createHash('sha256');
    const rcv = conn.open_receiver({ source: { address: addr }, credit_window: 2 });
    rcv.on('receiver_open', () => console.log('READY'));
    rcv.on('message', (ctx) => {
        const b = ctx.message.body.content || ctx.message.body;
        const seq = ctx.message.message_id;
        if (b.readUInt32BE(0) !== seq || b[b.length - 1] !== (seq & 0xff)) bad++;
        hash.update(b);
        received++; bytes += b.length;
        if (received === count) { console.log(JSON.stringify({ received, bytes, bad, sha256: hash.digest('hex'), seconds: (Date.now() - t0) / 1000 })); conn.close(); }
    });
}
