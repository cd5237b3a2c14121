#!/usr/bin/env node
// A sluice.checks.v1 admission-check provider in plain JavaScript.
//
// It sends every pod of an admitted workload to a pool of nodes: the
// AdmissionCheck's parameters name the pool's node labels,
//
//   parameters: {"nodeLabels": {"pool": "a100"}}
//
// and every READY answer puts those labels in each pod set's node selector.
// It loads the contract from the project's .proto files at start-up (no
// generated code) and remembers each decision by evaluation_key until
// sluice releases it.
//
//   node provider.js --addr 127.0.0.1:9091
//
// With --tls-cert-file and --tls-key-file it serves TLS, and with
// --tls-ca-file it requires the client certificate sluice's admitter
// presents (mutual TLS); the files are read again while it runs.
'use strict';

const fs = require('node:fs');
const path = require('node:path');
const { parseArgs } = require('node:util');
const grpc = require('@grpc/grpc-js');
const protoLoader = require('@grpc/proto-loader');

const PROVIDER_NAME = 'pool.checks.example.com';
const CONTRACT_VERSION = 'sluice.checks.v1';
// The revision of the contract whose rules this provider keeps (see
// "Revisions" in checks.proto): revision 2's request rules, checked in
// evaluateRequestProblems and PoolCheck.release, and one answer per
// evaluation_key. sluice sends it nothing a later revision adds.
const CONTRACT_REVISION = 'CONTRACT_REVISION_2';
const VENDOR_VERSION = require('./package.json').version;
const DEFAULT_ADDR = '127.0.0.1:9091';
const READY_REASON = 'NodePoolAssigned';

// Limits of the contract (proto/sluice/checks/v1/checks.proto).
const MAX_EVALUATION_KEY_BYTES = 512;
const MAX_MESSAGE_BYTES = 1024;

// How often the TLS files are read again: a rotated certificate (a
// Secret volume cert-manager renews) applies to new connections within a
// minute, without a restart.
const DEFAULT_TLS_REFRESH_MS = 60_000;

// How long calls in flight may finish after SIGTERM before the server
// closes their connections.
const SHUTDOWN_GRACE_MS = 10_000;

// ---------------------------------------------------------------------------
// Loading the contract.

// The repository's proto/ directory; the google/protobuf well-known types
// the contract imports come with protobufjs, inside @grpc/proto-loader.
const PROTO_ROOT = path.resolve(__dirname, '..', '..', 'proto');
const CHECKS_PROTO = path.join(PROTO_ROOT, 'sluice', 'checks', 'v1', 'checks.proto');

function loadContract() {
  const definition = protoLoader.loadSync(CHECKS_PROTO, {
    includeDirs: [PROTO_ROOT],
    // Field names as in the .proto (evaluation_key, pod_sets). The
    // well-known types protobufjs bundles keep their camelCase names
    // (google.protobuf.Value's structValue) whatever this says.
    keepCase: true,
    enums: String, // enum values by name: 'STATE_READY'
    longs: String,
    defaults: false, // absent fields stay absent: an unset workload is not {}
    oneofs: true, // google.protobuf.Value says which kind it holds
  });
  return grpc.loadPackageDefinition(definition).sluice.checks.v1;
}

// ---------------------------------------------------------------------------
// Kubernetes syntax, as the contract's header defines it.

const NAME_RE = /^[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?$/;
const DNS_SUBDOMAIN_RE = /^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$/;

// qualifiedNameError returns why key is not a Kubernetes label key, or ''.
function qualifiedNameError(key) {
  const slash = key.indexOf('/');
  let name = key;
  if (slash >= 0) {
    const prefix = key.slice(0, slash);
    name = key.slice(slash + 1);
    if (prefix === '') {
      return 'prefix before \'/\' must not be empty';
    }
    if (prefix.length > 253 || !DNS_SUBDOMAIN_RE.test(prefix)) {
      return `prefix ${JSON.stringify(prefix)} must be a DNS subdomain: at most 253 characters of lowercase letters, digits, '-' and '.'`;
    }
  }
  if (name === '') {
    return 'name part must not be empty';
  }
  if (name.length > 63) {
    return `name part must be at most 63 characters, got ${name.length}`;
  }
  if (!NAME_RE.test(name)) {
    return `name part ${JSON.stringify(name)} must consist of letters, digits, '-', '_' or '.', starting and ending with a letter or digit`;
  }
  return '';
}

// labelValueError returns why value is not a Kubernetes label value, or ''.
function labelValueError(value) {
  if (value === '') {
    return '';
  }
  if (value.length > 63) {
    return `must be at most 63 characters, got ${value.length}`;
  }
  if (!NAME_RE.test(value)) {
    return `${JSON.stringify(value)} must be empty or consist of letters, digits, '-', '_' or '.', starting and ending with a letter or digit`;
  }
  return '';
}

// log writes one line to stdout.
function log(line) {
  process.stdout.write(`checks-js: ${line}\n`);
}

// ---------------------------------------------------------------------------
// Errors.

// invalidArgument is a gRPC INVALID_ARGUMENT error; problems are
// "field: what is wrong" strings, all of them on one line.
function invalidArgument(problems) {
  const err = new Error(problems.join('; '));
  err.code = grpc.status.INVALID_ARGUMENT;
  return err;
}

function internalError(err) {
  const e = new Error(`internal error: ${err && err.message ? err.message : String(err)}`);
  e.code = grpc.status.INTERNAL;
  return e;
}

// ---------------------------------------------------------------------------
// Requests.

// evaluateRequestProblems lists the contract's request rules that req
// breaks, naming each field.
function evaluateRequestProblems(req) {
  const problems = [];
  const key = req.evaluation_key || '';
  if (key === '') {
    problems.push('evaluation_key: required');
  } else if (Buffer.byteLength(key, 'utf8') > MAX_EVALUATION_KEY_BYTES) {
    problems.push(`evaluation_key: must be at most ${MAX_EVALUATION_KEY_BYTES} bytes, got ${Buffer.byteLength(key, 'utf8')}`);
  }
  const w = req.workload;
  if (w === undefined || w === null) {
    problems.push('workload: required');
    return problems;
  }
  if (!w.namespace) {
    problems.push('workload.namespace: required');
  }
  if (!w.name) {
    problems.push('workload.name: required');
  }
  const seen = new Map();
  (w.pod_sets || []).forEach((ps, i) => {
    const field = `workload.pod_sets[${i}].name`;
    const name = ps.name || '';
    if (name === '') {
      problems.push(`${field}: required`);
    } else if (seen.has(name)) {
      problems.push(`${field}: ${JSON.stringify(name)} is also the name of workload.pod_sets[${seen.get(name)}]`);
    } else {
      seen.set(name, i);
    }
  });
  return problems;
}

// ---------------------------------------------------------------------------
// Parameters.

// fromValue turns a google.protobuf.Value, as proto-loader decodes it,
// into a plain JavaScript value. The oneofs option names the field that is
// set in v.kind. protobufjs bundles the well-known types with camelCase
// field names (structValue, not struct_value) whatever keepCase says, so
// the kind is compared without case or underscores.
function fromValue(v) {
  if (v === undefined || v === null || typeof v.kind !== 'string') {
    return null;
  }
  const x = v[v.kind];
  switch (v.kind.replace(/_/g, '').toLowerCase()) {
    case 'numbervalue':
      return Number(x);
    case 'stringvalue':
      return String(x);
    case 'boolvalue':
      return Boolean(x);
    case 'structvalue':
      return fromStruct(x);
    case 'listvalue':
      return ((x && x.values) || []).map(fromValue);
    default: // nullValue
      return null;
  }
}

// fromStruct turns a google.protobuf.Struct into a plain object.
function fromStruct(s) {
  const out = {};
  for (const [k, v] of Object.entries((s && s.fields) || {})) {
    out[k] = fromValue(v);
  }
  return out;
}

function jsonKind(v) {
  if (v === null) {
    return 'null';
  }
  if (Array.isArray(v)) {
    return 'array';
  }
  return typeof v; // object, string, number, boolean
}

// parseParameters checks the AdmissionCheck's parameters and returns the
// pool's node labels, or throws INVALID_ARGUMENT naming the parameter:
//
//   nodeLabels  object, required, not empty: label key -> label value, the
//               node labels of the pool; they become the pods' nodeSelector.
//
// Nothing else is accepted, so that a typo in an AdmissionCheck is reported
// instead of ignored.
function parseParameters(parameters) {
  const params = fromStruct(parameters); // absent parameters are {}
  const problems = [];
  for (const k of Object.keys(params).sort()) {
    if (k !== 'nodeLabels') {
      problems.push(`parameters: unknown field ${JSON.stringify(k)} (the only parameter is nodeLabels)`);
    }
  }
  const labels = params.nodeLabels;
  if (labels === undefined) {
    problems.push('parameters.nodeLabels: required: the node labels of the pool, such as {"pool": "a100"}');
  } else if (jsonKind(labels) !== 'object') {
    problems.push(`parameters.nodeLabels: expected object, got ${jsonKind(labels)}`);
  } else if (Object.keys(labels).length === 0) {
    problems.push('parameters.nodeLabels: must name at least one node label, such as {"pool": "a100"}');
  } else {
    for (const k of Object.keys(labels).sort()) {
      const field = `parameters.nodeLabels[${JSON.stringify(k)}]`;
      const v = labels[k];
      const keyErr = qualifiedNameError(k);
      if (keyErr !== '') {
        problems.push(`${field}: invalid key: ${keyErr}`);
      }
      if (typeof v !== 'string') {
        problems.push(`${field}: expected string, got ${jsonKind(v)}`);
        continue;
      }
      const valueErr = labelValueError(v);
      if (valueErr !== '') {
        problems.push(`${field}: invalid value: ${valueErr}`);
      }
    }
  }
  if (problems.length > 0) {
    throw invalidArgument(problems);
  }
  const nodeLabels = {};
  for (const k of Object.keys(labels).sort()) {
    nodeLabels[k] = labels[k];
  }
  return nodeLabels;
}

// ---------------------------------------------------------------------------
// The check.

// truncate shortens s to at most n bytes of UTF-8.
function truncate(s, n) {
  if (Buffer.byteLength(s, 'utf8') <= n) {
    return s;
  }
  let out = s.slice(0, n - 3);
  while (Buffer.byteLength(out, 'utf8') > n - 3) {
    out = out.slice(0, -1);
  }
  return out + '...';
}

// decide answers READY with one update per pod set that adds the pool's
// node labels to the pods' node selector.
function decide(req, nodeLabels) {
  const selector = Object.entries(nodeLabels).map(([k, v]) => `${k}=${v}`).join(',');
  return {
    state: 'STATE_READY',
    reason: READY_REASON,
    message: truncate(`pods go to nodes with ${selector}`, MAX_MESSAGE_BYTES),
    pod_set_updates: (req.workload.pod_sets || []).map((ps) => ({
      name: ps.name,
      node_selector: { ...nodeLabels },
    })),
  };
}

// PoolCheck holds the answers given, by evaluation_key: the key is unique
// per AdmissionCheck and quota reservation, so it is the whole key. A
// repeated Evaluate gets the answer it got the first time; Release forgets
// it.
class PoolCheck {
  constructor() {
    this.decisions = new Map();
  }

  evaluate(req) {
    const problems = evaluateRequestProblems(req);
    if (problems.length > 0) {
      throw invalidArgument(problems);
    }
    const nodeLabels = parseParameters(req.parameters);
    const key = req.evaluation_key;
    const held = this.decisions.get(key);
    if (held !== undefined) {
      return held;
    }
    const answer = decide(req, nodeLabels);
    this.decisions.set(key, answer);
    log(`${answer.state} ${JSON.stringify(key)} for ${req.workload.namespace}/${req.workload.name} (check ${JSON.stringify(req.check_name || '')})`);
    return answer;
  }

  release(req) {
    if (!req.evaluation_key) {
      throw invalidArgument(['evaluation_key: required']);
    }
    // Releasing an unknown key succeeds: sluice may release a key twice,
    // or one this process never saw (it restarted).
    const held = this.decisions.delete(req.evaluation_key);
    if (held) {
      log(`released ${JSON.stringify(req.evaluation_key)} (${req.reason || 'RELEASE_REASON_UNSPECIFIED'})`);
    }
    return {};
  }
}

// unary adapts a function of the request to a gRPC handler; thrown errors
// with a gRPC code are sent as they are, anything else as INTERNAL.
function unary(fn) {
  return (call, callback) => {
    try {
      callback(null, fn(call.request));
    } catch (err) {
      callback(typeof (err && err.code) === 'number' ? err : internalError(err));
    }
  };
}

// ---------------------------------------------------------------------------
// Serving.

// Server options. sluice pings every connection every 30 seconds, with or
// without calls in flight, and the contract requires providers to permit
// that. grpc-js 1.14 servers do not police client pings at all (they never
// answer GOAWAY too_many_pings), so the first two options below are
// not read by this version; they are set anyway, at the values the
// contract asks for, so that the policy stays explicit if a later grpc-js
// starts enforcing one under gRPC's standard option names.
const SERVER_OPTIONS = {
  // Accept keepalive pings on connections without calls.
  'grpc.keepalive_permit_without_calls': 1,
  // Accept a ping every 20 seconds or more on an idle connection (sluice
  // sends one every 30 seconds).
  'grpc.http2.min_ping_interval_without_data_ms': 20_000,
  // The server's own pings: every 60 seconds, closing the connection when
  // a ping goes unanswered for 20 seconds (the peer is gone).
  'grpc.keepalive_time_ms': 60_000,
  'grpc.keepalive_timeout_ms': 20_000,
};

function parseFlags(argv) {
  const { values } = parseArgs({
    args: argv,
    options: {
      addr: { type: 'string', default: DEFAULT_ADDR },
      'tls-cert-file': { type: 'string' },
      'tls-key-file': { type: 'string' },
      'tls-ca-file': { type: 'string' },
      'tls-refresh-interval-ms': { type: 'string', default: String(DEFAULT_TLS_REFRESH_MS) },
      help: { type: 'boolean', short: 'h', default: false },
    },
    strict: true,
  });
  return values;
}

const USAGE = `usage: node provider.js [--addr host:port] [--tls-cert-file f --tls-key-file f [--tls-ca-file f]]

Serves sluice.checks.v1 (IdentityService, CheckService) over gRPC: plaintext,
or TLS with --tls-cert-file and --tls-key-file.

  --addr host:port               address to listen on (default ${DEFAULT_ADDR})
  --tls-cert-file file           PEM certificate chain to serve TLS with
  --tls-key-file file            PEM private key of --tls-cert-file
  --tls-ca-file file             PEM CA bundle of the client certificates to
                                 require (mutual TLS)
  --tls-refresh-interval-ms n    how often the TLS files are read again
                                 (default ${DEFAULT_TLS_REFRESH_MS})
`;

// serverCredentials returns plaintext credentials without TLS flags, else
// TLS credentials that read the files again every refresh interval
// (grpc-js's FileWatcherCertificateProvider, experimental in 1.14). It
// throws an Error naming the flag for a bad combination or a file it
// cannot read.
function serverCredentials(flags) {
  const cert = flags['tls-cert-file'];
  const key = flags['tls-key-file'];
  const ca = flags['tls-ca-file'];
  if (cert === undefined && key === undefined && ca === undefined) {
    return { credentials: grpc.ServerCredentials.createInsecure(), transport: 'plaintext' };
  }
  if (cert === undefined || key === undefined) {
    throw new Error('--tls-cert-file and --tls-key-file are both required to serve TLS (--tls-ca-file, optional, requires client certificates)');
  }
  const refreshMs = Number(flags['tls-refresh-interval-ms']);
  if (!Number.isInteger(refreshMs) || refreshMs <= 0) {
    throw new Error(`--tls-refresh-interval-ms: ${JSON.stringify(flags['tls-refresh-interval-ms'])} is not a positive number of milliseconds`);
  }
  for (const [flag, file] of [['--tls-cert-file', cert], ['--tls-key-file', key], ['--tls-ca-file', ca]]) {
    if (file === undefined) {
      continue;
    }
    try {
      fs.accessSync(file, fs.constants.R_OK);
    } catch (err) {
      throw new Error(`${flag}: ${err.message}`);
    }
  }
  const files = new grpc.experimental.FileWatcherCertificateProvider({
    certificateFile: cert,
    privateKeyFile: key,
    caCertificateFile: ca,
    refreshIntervalMs: refreshMs,
  });
  // grpc-js 1.14 hands its first argument to the identity and its second
  // to the CA, whatever the declaration calls them.
  const credentials = grpc.experimental.createCertificateProviderServerCredentials(files, ca === undefined ? null : files, ca !== undefined);
  return { credentials, transport: ca === undefined ? 'TLS' : 'mutual TLS' };
}

// splitHostPort returns [host, port] of "host:port" or "[v6]:port".
function splitHostPort(addr) {
  const m = /^(\[[^\]]*\]|[^:]*):(\d{1,5})$/.exec(addr);
  if (!m || Number(m[2]) > 65535) {
    return null;
  }
  return [m[1], Number(m[2])];
}

function main(argv) {
  let flags;
  try {
    flags = parseFlags(argv);
  } catch (err) {
    process.stderr.write(`${err.message}\n${USAGE}`);
    process.exit(2);
  }
  if (flags.help) {
    process.stdout.write(USAGE);
    return;
  }
  const hostPort = splitHostPort(flags.addr);
  if (hostPort === null) {
    process.stderr.write(`--addr: ${JSON.stringify(flags.addr)} is not host:port, such as 127.0.0.1:9091\n`);
    process.exit(2);
  }
  let creds;
  try {
    creds = serverCredentials(flags);
  } catch (err) {
    process.stderr.write(`${err.message}\n`);
    process.exit(2);
  }

  const contract = loadContract();
  const info = {
    name: PROVIDER_NAME,
    vendor_version: VENDOR_VERSION,
    contract_versions: [CONTRACT_VERSION],
    capabilities: ['CAPABILITY_POD_SET_UPDATES', 'CAPABILITY_RELEASE'],
    contract_revision: CONTRACT_REVISION,
  };
  const check = new PoolCheck();

  const server = new grpc.Server(SERVER_OPTIONS);
  server.addService(contract.IdentityService.service, {
    GetProviderInfo: unary(() => info),
    Probe: unary(() => ({ ready: true })),
  });
  server.addService(contract.CheckService.service, {
    Evaluate: unary((req) => check.evaluate(req)),
    Release: unary((req) => check.release(req)),
  });

  server.bindAsync(flags.addr, creds.credentials, (err, port) => {
    if (err) {
      process.stderr.write(`checks-js: listen on ${flags.addr}: ${err.message}\n`);
      process.exit(1);
    }
    log(`serving ${CONTRACT_VERSION} as ${PROVIDER_NAME} on ${hostPort[0]}:${port} (${creds.transport})`);
  });

  let stopping = false;
  const stop = (signal) => {
    if (stopping) {
      return;
    }
    stopping = true;
    log(`${signal}: stopping`);
    const force = setTimeout(() => server.forceShutdown(), SHUTDOWN_GRACE_MS);
    force.unref();
    server.tryShutdown(() => {
      clearTimeout(force);
      process.exit(0);
    });
  };
  process.on('SIGTERM', () => stop('SIGTERM'));
  process.on('SIGINT', () => stop('SIGINT'));
}

main(process.argv.slice(2));
