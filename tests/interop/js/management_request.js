// One AMQP management request with rhea, as qdmanage / rhea users send it; prints the response as JSON.
// usage: node management_request.js URL APPLICATION_PROPERTIES_JSON [BODY_JSON]
'use strict';
const rhea = require('rhea');

const [url, propsJson, bodyJson] = process.argv.slice(2);
const { hostname, port } = new URL(url);
const container = rhea.create_container({ id: 'rhea-management-test' });
const timer = setTimeout(() => { console.error('no response within 10 s'); process.exit(3); }, 10000);

const conn = container.connect({ host: hostname, port: Number(port), reconnect: false });
const receiver = conn.open_receiver({ source: { dynamic: true } });
const sender = conn.open_sender('$management');

receiver.on('receiver_open', (context) => {
  sender.send({
    reply_to: context.receiver.source.address,
    correlation_id: 'req-1',
    application_properties: JSON.parse(propsJson),
    body: bodyJson === undefined ? undefined : JSON.parse(bodyJson),
  });
});
receiver.on('message', (context) => {
  const m = context.message;
  console.log(JSON.stringify({ correlation_id: m.correlation_id, properties: m.application_properties,
                               body: m.body }));
  clearTimeout(timer);
  conn.close();
});
conn.on('connection_close', () => process.exit(0));
conn.on('disconnected', (context) => {
  if (context.error) { console.error(String(context.error)); process.exit(4); }
});
