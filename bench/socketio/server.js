// A plain socket.io server: the comparison column of BENCHMARKS.md, driven
// by the same load generator as rtserver (rtbench --socketio). It does
// what rtserver does in the measured regimes and nothing more: a client
// joins a room per topic ("subscribe") and a publish is emitted to the
// room ("publish"), each acknowledged. Defaults of socket.io 4 otherwise,
// with the websocket transport only (rtbench does not poll).
//
//   npm ci && PORT=3000 node server.js
const http = require('node:http');
const { Server } = require('socket.io');

const host = process.env.HOST || '127.0.0.1';
const port = Number(process.env.PORT || 3000);

const httpServer = http.createServer();
const io = new Server(httpServer, { transports: ['websocket'], serveClient: false });

io.on('connection', (socket) => {
  socket.on('subscribe', (p, ack) => {
    if (!p || typeof p.topic !== 'string') {
      if (typeof ack === 'function') ack({ error: 'topic is required' });
      return;
    }
    socket.join(p.topic);
    if (typeof ack === 'function') ack(true);
  });
  socket.on('publish', (p, ack) => {
    if (!p || typeof p.topic !== 'string') {
      if (typeof ack === 'function') ack({ error: 'topic is required' });
      return;
    }
    io.to(p.topic).emit('message', { topic: p.topic, data: p.data });
    if (typeof ack === 'function') ack(true);
  });
});

httpServer.listen(port, host, () => {
  console.log(`socket.io listening on ${host}:${port} (pid ${process.pid}, node ${process.version})`);
});
