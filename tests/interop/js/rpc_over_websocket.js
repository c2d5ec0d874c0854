// RPC over AMQP-over-WebSocket with rhea: a server (consumes ADDRESS, answers reply_to) on one URL and a
// caller on another, each a WebSocket connection; prints one JSON line with what the caller got.
// usage: node rpc_over_websocket.js SERVER_WS_URL CALLER_WS_URL ADDRESS CALLS [CA_FILE]
'use strict';
const fs = require('fs');
const rhea = require('rhea');
const WebSocket = require('ws');

const [serverUrl, callerUrl, address, callsText, caFile] = process.argv.slice(2);
const calls = Number(callsText);
const timer = setTimeout(() => { console.error('timed out'); process.exit(3); }, 20000);

function connect(url, id) {
  const container = rhea.create_container({ id });
  const options = caFile ? { ca: fs.readFileSync(caFile) } : undefined;
  const ws = container.websocket_connect(WebSocket);
  return container.connect({ connection_details: ws(url, ['amqp'], options), reconnect: false });
}

const server = connect(serverUrl, 'ws-rpc-server');
server.open_receiver({ source: address, credit_window: 10 }).on('message', (context) => {
  const m = context.message;
  server.send({ to: m.reply_to, correlation_id: m.message_id, body: `echo: ${m.body}` });
});
const serverSender = server.open_sender();   // the anonymous relay, for the replies
server.send = (msg) => serverSender.send(msg);

server.on('receiver_open', () => {
  const caller = connect(callerUrl, 'ws-rpc-caller');
  const replies = caller.open_receiver({ source: { dynamic: true } });
  const got = [];
  replies.on('receiver_open', (context) => {
    const replyTo = context.receiver.source.address;
    const sender = caller.open_sender(address);
    let sent = 0;
    sender.on('sendable', () => {
      while (sent < calls && sender.sendable()) {
        sender.send({ message_id: `call-${sent}`, reply_to: replyTo, body: `hello ${sent}` });
        sent += 1;
      }
    });
  });
  replies.on('message', (context) => {
    got.push({ correlation_id: context.message.correlation_id, body: context.message.body });
    if (got.length === calls) {
      console.log(JSON.stringify(got));
      clearTimeout(timer);
      caller.close();
      server.close();
      setTimeout(() => process.exit(0), 100);
    }
  });
});
server.on('disconnected', (context) => {
  if (context.error) { console.error('server: ' + String(context.error)); process.exit(4); }
});
