'use strict'
// Hyperswarm for infertui: NDJSON commands on stdin, NDJSON events on stdout.
//
// Commands: init {bootstrap, seed, host, firewalled} · listen · join/leave {topic, server,
// client} · refresh {topic} · connect {key} · end {conn} · destroy {conn} · shutdown
// Events:   ready {publicKey, ...network} · network {online, degraded, nodes}
//           · listening · joined {topic} · open {conn, remoteKey, initiator}
//           · end {conn} · close {conn} · pressure {conn, paused}
//           · error {conn?, id?, code?, message} · done {id}
// Payload bytes skip JSON: a write is the header line `W<conn> <length>` and then the raw
// bytes; a data event likewise `D<conn> <length>` and the bytes. Keys, topics and seeds travel
// as hex. The bridge exits when its stdin closes (not on SIGINT or SIGTERM: its parent says
// when), and pauses every peer socket while its own stdout is full.

const Hyperswarm = require('hyperswarm')
const DHT = require('hyperdht')
const b4a = require('b4a')

let swarm = null
let nextConn = 1
const joined = new Map() // topic (hex) -> its discovery session, for refresh
const conns = new Map() // conn id -> socket
let stdoutFull = false
const CHUNK = 64 * 1024 // bytes per data event and per socket write

function emit(event) {
  out(JSON.stringify(event) + '\n')
}

function out(chunk) {
  const ok = process.stdout.write(chunk)
  if (!ok && !stdoutFull) {
    stdoutFull = true
    for (const socket of conns.values()) socket.pause()
    process.stdout.once('drain', () => {
      stdoutFull = false
      for (const socket of conns.values()) socket.resume()
    })
  }
}

// What the DHT looks like from here: `nodes` is the routing table's size (0: no DHT node
// answered, so nobody can find us or be found), `online`/`degraded` hyperdht's own health.
function network() {
  const dht = swarm.dht
  return { online: !!dht.online, degraded: !!dht.degraded, nodes: dht.table ? dht.table.size : 0 }
}

function parseBootstrap(list) {
  if (!list || list.length === 0) return undefined // the public DHT
  return list.map((entry) => {
    const at = entry.lastIndexOf(':')
    return { host: entry.slice(0, at), port: Number(entry.slice(at + 1)) }
  })
}

function onConnection(socket, info) {
  const conn = nextConn++
  conns.set(conn, socket)
  socket.setKeepAlive?.(3000)
  socket.setTimeout?.(10000) // a peer silent for 10 s (keep-alives included) is gone
  emit({
    event: 'open',
    conn,
    remoteKey: b4a.toString(info.publicKey, 'hex'),
    initiator: !!info.client
  })
  // A peer may send one huge frame; events stay small so no single stdout line is huge.
  socket.on('data', (data) => {
    for (let at = 0; at < data.length; at += CHUNK) {
      const part = data.subarray(at, at + CHUNK)
      out(b4a.concat([b4a.from(`D${conn} ${part.length}\n`), part]))
    }
  })
  socket.on('end', () => {
    emit({ event: 'end', conn })
    socket.end()
  })
  socket.on('drain', () => emit({ event: 'pressure', conn, paused: false }))
  socket.on('error', (err) => emit({ event: 'error', conn, message: err.message }))
  socket.on('close', () => {
    conns.delete(conn)
    emit({ event: 'close', conn })
  })
  if (stdoutFull) socket.pause()
}

const commands = {
  async init({ bootstrap, seed, host, firewalled }) {
    const keyPair = seed ? DHT.keyPair(b4a.from(seed, 'hex')) : DHT.keyPair()
    const dht = new DHT({
      bootstrap: parseBootstrap(bootstrap),
      host: host || undefined,
      firewalled: firewalled !== false,
      keyPair
    })
    swarm = new Hyperswarm({ dht, keyPair })
    swarm.on('connection', onConnection)
    await dht.ready()
    dht.on('network-update', () => emit({ event: 'network', ...network() }))
    emit({ event: 'ready', publicKey: b4a.toString(keyPair.publicKey, 'hex'), ...network() })
  },
  async listen() {
    // Hyperswarm keeps one connection per remote key and closes the older one when that key
    // connects again: right for a swarm of equals, wrong for a host whose user has a chat
    // window and a script open under one key. The host takes every connection as it comes
    // (and bounds how many one key holds itself).
    swarm.server.removeAllListeners('connection')
    swarm.server.on('connection', (socket) => {
      if (swarm.destroyed) return socket.on('error', () => {}).destroy()
      onConnection(socket, { publicKey: socket.remotePublicKey, client: false })
    })
    await swarm.listen()
    emit({ event: 'network', ...network() })
    emit({ event: 'listening' })
  },
  async join({ topic, server, client }) {
    const discovery = swarm.join(b4a.from(topic, 'hex'), { server: !!server, client: !!client })
    joined.set(topic, discovery)
    await discovery.flushed()
    emit({ event: 'joined', topic })
  },
  async refresh({ topic }) {
    // Hyperswarm looks a topic up again only every 10 minutes: a client that wants the hosts
    // that came after it asks sooner.
    const discovery = joined.get(topic)
    if (discovery) await discovery.refresh()
  },
  async leave({ topic }) {
    joined.delete(topic)
    await swarm.leave(b4a.from(topic, 'hex'))
  },
  async connect({ id, key }) {
    // A direct DHT connection, so that a failure comes back with its reason.
    const socket = swarm.dht.connect(b4a.from(key, 'hex'), { keyPair: swarm.keyPair })
    await new Promise((resolve, reject) => {
      socket.once('open', () => {
        // listeners go on in this very event: a host that answers and closes at once
        // (a refusal) must not have its data or close slip by before we listen
        onConnection(socket, { publicKey: socket.remotePublicKey, client: true })
        resolve()
      })
      socket.once('error', (err) =>
        reject(Object.assign(new Error(err.message), { code: err.code || 'CONNECT_FAILED' }))
      )
      socket.once('close', () => reject(Object.assign(new Error('closed'), { code: 'CLOSED' })))
    })
  },
  async write({ conn, bytes }) {
    const socket = conns.get(conn)
    if (!socket) return emit({ event: 'close', conn })
    let ok = true
    for (let at = 0; at < bytes.length; at += CHUNK) ok = socket.write(bytes.subarray(at, at + CHUNK))
    if (!ok) emit({ event: 'pressure', conn, paused: true })
  },
  async end({ conn }) {
    conns.get(conn)?.end()
  },
  async destroy({ conn }) {
    conns.get(conn)?.destroy()
  },
  async shutdown() {
    await stop()
  }
}

let stopping = null
function stop() {
  if (!stopping) {
    stopping = (async () => {
      // Ended sockets get a moment to deliver what is queued (a reply's last chunks and its
      // chat_end) before the swarm goes.
      const closed = [...conns.values()].map(
        (socket) => new Promise((resolve) => socket.once('close', resolve).end())
      )
      await Promise.race([Promise.all(closed), new Promise((resolve) => setTimeout(resolve, 1000))])
      for (const socket of conns.values()) socket.destroy()
      if (swarm) await swarm.destroy()
      process.exit(0)
    })()
  }
  return stopping
}

// Commands run one after another, in the order they arrive. A write runs at once when
// nothing is queued before it (the hot path: one token's lines, no promise hop).
let queue = null
let pending = 0
function submit(message) {
  if (pending === 0 && message.cmd === 'write') return commands.write(message)
  pending++
  queue = (queue || Promise.resolve()).then(() => run(message)).finally(() => pending--)
}

let buffered = b4a.alloc(0)
process.stdin.on('data', (chunk) => {
  buffered = buffered.length ? b4a.concat([buffered, chunk]) : chunk
  for (;;) {
    const nl = buffered.indexOf(10)
    if (nl < 0) break
    if (buffered[0] === 87) { // 'W': a header, then raw bytes
      const [conn, length] = b4a.toString(buffered.subarray(1, nl)).split(' ').map(Number)
      if (buffered.length < nl + 1 + length) break
      submit({ cmd: 'write', conn, bytes: buffered.subarray(nl + 1, nl + 1 + length) })
      buffered = buffered.subarray(nl + 1 + length)
      continue
    }
    const line = b4a.toString(buffered.subarray(0, nl))
    buffered = buffered.subarray(nl + 1)
    if (!line.trim()) continue
    try {
      submit(JSON.parse(line))
    } catch (err) {
      emit({ event: 'error', message: `bad command: ${err.message}` })
    }
  }
})

async function run(message) {
  const handler = commands[message.cmd]
  if (!handler) return emit({ event: 'error', id: message.id, message: `unknown command ${message.cmd}` })
  try {
    await handler(message)
    if (message.id !== undefined) emit({ event: 'done', id: message.id })
  } catch (err) {
    emit({ event: 'error', id: message.id, code: err.code, message: err.message })
  }
}
process.stdin.on('end', () => (queue || Promise.resolve()).then(stop))
// Ctrl+C in a terminal and systemd's stop signal reach the whole process group: the parent
// drains its replies through this bridge and then closes stdin, which is when we stop.
process.on('SIGTERM', () => {})
process.on('SIGINT', () => {})
