// Package crashpoint lets crash tests kill a service at a named point of its
// work, to prove that every state it leaves behind is one it recovers from.
//
// Services call Hit after each durable write whose aftermath must survive a
// crash. Only binaries built with the tag sluice_crashpoints can crash: in
// every other build Hit is an empty function the compiler inlines away, so
// release binaries carry neither the cost nor the risk. In a tagged build
// Hit kills the process with SIGKILL when the environment variable
// SLUICE_CRASHPOINT names the point.
package crashpoint

// EnvVar names the crash point a tagged build dies at.
const EnvVar = "SLUICE_CRASHPOINT"
