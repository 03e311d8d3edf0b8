// A CPU-heavy HTTP handler (a 1,000,000-iteration loop per request), the kind
// of server that needs several processes to use several cores.
//
// It accepts on fd 3 when the supervisor passed a socket to this very process
// (LISTEN_PID), else it binds $PORT. On SIGTERM it drains (see drain()).
'use strict';
const http = require('http');

const instance = process.env.SUPERVISE_INSTANCE || '0';
const DRAIN_WINDOW_MS = 1000;
let draining = false;
let served = 0;

function work() {
  let x = 0;
  for (let i = 0; i < 1000000; i++) x = (x + i) | 0;
  return x;
}

const server = http.createServer((req, res) => {
  served += 1;
  const result = work();
  if (draining) res.setHeader('Connection', 'close');
  res.end(`instance ${instance} pid ${process.pid} result ${result} served ${served}\n`);
});
server.keepAliveTimeout = 5000;

const inherited = process.env.LISTEN_PID === String(process.pid) && Number(process.env.LISTEN_FDS) >= 1;
server.listen(inherited ? { fd: 3 } : Number(process.env.PORT || 3000), () => {
  console.log(`instance ${instance} listening (${inherited ? 'fd 3' : 'own port'})`);
});

// On SIGTERM: stop accepting (siblings share the socket), answer further
// requests on kept-alive connections with `Connection: close` so clients
// reconnect to a sibling, close connections still idle after the drain window,
// and exit once every connection is done.
function drain() {
  if (draining) return;
  draining = true;
  // Since Node 19, server.close() also closes every connection that looks
  // idle — including kept-alive ones whose next request is already on its way
  // but not yet read, which the client then sees cut. So stop accepting with
  // close(), but close idle connections only after the drain window.
  const closeIdleConnections = server.closeIdleConnections.bind(server);
  server.closeIdleConnections = () => {};
  server.close(() => {
    console.log(`instance ${instance} drained after ${served} requests`);
    process.exit(0);
  });
  setTimeout(closeIdleConnections, DRAIN_WINDOW_MS).unref();
  setTimeout(() => server.closeAllConnections(), 4 * DRAIN_WINDOW_MS).unref();
}
process.on('SIGTERM', drain);
process.on('SIGINT', drain);
