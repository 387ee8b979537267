'use strict'
// A local DHT testnet for tests: prints {"bootstrap": ["127.0.0.1:PORT"]} and runs until
// its stdin closes. Every node binds to 127.0.0.1 and runs non-firewalled.
const createTestnet = require('@hyperswarm/testnet')

async function main() {
  const size = Number(process.argv[2] || 3)
  const testnet = await createTestnet(size, { host: '127.0.0.1' })
  const bootstrap = testnet.bootstrap.map(({ host, port }) => `${host}:${port}`)
  process.stdout.write(JSON.stringify({ bootstrap }) + '\n')
  const stop = async () => {
    await testnet.destroy()
    process.exit(0)
  }
  process.stdin.on('end', stop)
  process.stdin.resume()
  process.on('SIGTERM', stop)
}

main().catch((err) => {
  process.stderr.write(`${err.stack}\n`)
  process.exit(1)
})
