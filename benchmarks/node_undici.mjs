// The original library, undici@7 on Node, under the same runner protocol as
// benchmarks/runners/*.py: `node node_undici.mjs undici '<spec json>'` prints
// one JSON line. undici is loaded from benchmarks/.node/node_modules
// (`npm install --prefix benchmarks/.node undici@7`; run.py does it when missing).
//
//   h1, c=1:      new Client(origin, { pipelining: 1 })
//   h1, c>1:      new Pool(origin, { connections: K, pipelining: 1 })
//   h2c:          new H2CClient(origin)                     (prior knowledge)
//   h2 over TLS:  new Pool(origin, { connections: K, allowH2: true, pipelining: 100,
//                                    connect: { ca } })
// Every request: `const { statusCode, body } = await d.request({ path, method: 'GET' })`
// then `await body.arrayBuffer()`.
import { createRequire } from 'node:module'
import { readFileSync } from 'node:fs'
import { fileURLToPath } from 'node:url'
import { dirname, join } from 'node:path'

const here = dirname(fileURLToPath(import.meta.url))

function emit (obj) {
  process.stdout.write(JSON.stringify(obj) + '\n')
}

function loadUndici () {
  try {
    return createRequire(join(here, '.node', 'package.json'))('undici')
  } catch (err) {
    emit({ skipped: `undici not installed in benchmarks/.node (${err.code || err.message})` })
    process.exit(0)
  }
}

function percentile (sorted, q) {
  if (sorted.length === 0) return 0
  const i = Math.min(sorted.length - 1, Math.max(0, Math.round(q * sorted.length + 0.5) - 1))
  return sorted[i]
}

function makeDispatcher (undici, spec) {
  if (spec.protocol === 'h2c') return new undici.H2CClient(spec.origin)
  if (spec.protocol === 'h2') {
    return new undici.Pool(spec.origin, {
      connections: spec.connections,
      allowH2: true,
      pipelining: 100,
      connect: { ca: readFileSync(spec.cafile) }
    })
  }
  if (spec.connections === 1) return new undici.Client(spec.origin, { pipelining: 1 })
  return new undici.Pool(spec.origin, { connections: spec.connections, pipelining: 1 })
}

async function phase (dispatcher, spec, n, deadline, rec, budgetEnd) {
  let left = n
  const take = () => {
    if (left <= 0) return false
    if (deadline !== null && performance.now() >= deadline) { left = 0; return false }
    left -= 1
    return true
  }
  const loop = async () => {
    while (take()) { // bounded: at most n iterations over all workers
      const started = performance.now()
      try {
        const { statusCode, body } = await dispatcher.request({ path: spec.path, method: 'GET' })
        const data = await body.arrayBuffer()
        if (statusCode !== 200) throw new Error(`status ${statusCode}`)
        if (data.byteLength !== spec.expect_len) {
          throw new Error(`body length ${data.byteLength}, expected ${spec.expect_len}`)
        }
        rec.latencies.push(performance.now() - started)
      } catch (err) {
        rec.errors += 1
        if (rec.firstError === null) rec.firstError = String(err).slice(0, 300)
      }
    }
  }
  let timer
  const timeout = new Promise(resolve => { timer = setTimeout(() => resolve(true), Math.max(1000, budgetEnd - performance.now())) })
  const workers = Promise.all(Array.from({ length: spec.concurrency }, loop)).then(() => false)
  const timedOut = await Promise.race([workers, timeout])
  clearTimeout(timer)
  left = 0
  return timedOut
}

async function main () {
  if (process.argv.length !== 4) throw new Error('usage: node_undici.mjs CLIENT SPEC_JSON')
  const spec = JSON.parse(process.argv[3])
  const undici = loadUndici()
  const dispatcher = makeDispatcher(undici, spec)
  try {
    const budgetEnd = performance.now() + spec.timeout_s * 1000 // warmup + measured phase
    await phase(dispatcher, spec, spec.warmup, null, { latencies: [], errors: 0, firstError: null }, budgetEnd)
    const rec = { latencies: [], errors: 0, firstError: null }
    const cpu0 = process.cpuUsage()
    const t0 = performance.now()
    const deadline = spec.calibrate_s ? t0 + spec.calibrate_s * 1000 : null
    const timedOut = await phase(dispatcher, spec, spec.n, deadline, rec, budgetEnd)
    const elapsed = (performance.now() - t0) / 1000
    const cpu = process.cpuUsage(cpu0)
    const ok = rec.latencies.length
    const sorted = Float64Array.from(rec.latencies).sort()
    emit({
      requests: ok,
      errors: rec.errors,
      first_error: rec.firstError,
      timed_out: timedOut,
      elapsed_s: elapsed,
      rps: elapsed > 0 ? ok / elapsed : 0,
      p50_ms: percentile(sorted, 0.5),
      p99_ms: percentile(sorted, 0.99),
      max_ms: ok ? sorted[ok - 1] : 0,
      cpu_us_per_req: ok ? (cpu.user + cpu.system) / ok : 0,
      maxrss_kb: process.resourceUsage().maxRSS
    })
  } finally {
    await dispatcher.destroy().catch(() => {})
  }
}

main().then(() => process.exit(0), err => {
  console.error(err && err.stack ? err.stack : err)
  process.exit(1)
})
