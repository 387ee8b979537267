'use strict'
// Hyperswarm for infertui: NDJSON commands on stdin, NDJSON events on stdout.
//
// Commands: init {bootstrap, seed, host, firewalled} · listen · join/leave {topic, server,
// client} · connect {key} · write {conn, data} · end {conn} · destroy {conn} · shutdown
// Events:   ready {publicKey} · listening · joined {topic} · open {conn, remoteKey, initiator}
//           · data {conn, data} · end {conn} · close {conn} · pressure {conn, paused}
//           · error {conn?, id?, code?, message} · done {id}
// Keys, topics and seeds travel as hex, payload bytes as base64. The bridge exits when its
// stdin closes, and pauses every peer socket while its own stdout is full.

const Hyperswarm = require('hyperswarm')
const DHT = require('hyperdht')
const b4a = require('b4a')
const readline = require('readline')

let swarm = null
let nextConn = 1
const conns = new Map() // conn id -> socket
let stdoutFull = false
const CHUNK = 64 * 1024 // bytes per data event and per socket write

function emit(event) {
  const ok = process.stdout.write(JSON.stringify(event) + '\n')
  if (!ok && !stdoutFull) {
    stdoutFull = true
    for (const socket of conns.values()) socket.pause()
    process.stdout.once('drain', () => {
      stdoutFull = false
      for (const socket of conns.values()) socket.resume()
    })
  }
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
      emit({ event: 'data', conn, data: b4a.toString(data.subarray(at, at + CHUNK), 'base64') })
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
    emit({ event: 'ready', publicKey: b4a.toString(keyPair.publicKey, 'hex') })
  },
  async listen() {
    await swarm.listen()
    emit({ event: 'listening' })
  },
  async join({ topic, server, client }) {
    const discovery = swarm.join(b4a.from(topic, 'hex'), { server: !!server, client: !!client })
    await discovery.flushed()
    emit({ event: 'joined', topic })
  },
  async leave({ topic }) {
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
  async write({ conn, data }) {
    const socket = conns.get(conn)
    if (!socket) return emit({ event: 'close', conn })
    const bytes = b4a.from(data, 'base64')
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
      for (const socket of conns.values()) socket.destroy()
      if (swarm) await swarm.destroy()
      process.exit(0)
    })()
  }
  return stopping
}

// Commands run one after another, in the order they arrive.
let queue = Promise.resolve()
const input = readline.createInterface({ input: process.stdin, crlfDelay: Infinity })
input.on('line', (line) => {
  queue = queue.then(() => run(line))
})

async function run(line) {
  if (!line.trim()) return
  let message
  try {
    message = JSON.parse(line)
  } catch (err) {
    return emit({ event: 'error', message: `bad command: ${err.message}` })
  }
  const handler = commands[message.cmd]
  if (!handler) return emit({ event: 'error', id: message.id, message: `unknown command ${message.cmd}` })
  try {
    await handler(message)
    if (message.id !== undefined) emit({ event: 'done', id: message.id })
  } catch (err) {
    emit({ event: 'error', id: message.id, code: err.code, message: err.message })
  }
}
input.on('close', () => queue.then(stop))
process.on('SIGTERM', stop)
process.on('SIGINT', stop)
