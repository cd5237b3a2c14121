package testenv

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"syscall"
	"testing"
)

// KubeconfigEnv is set by RunMain to the admin kubeconfig of the test
// package's control plane, so code that loads the default client
// configuration (controller-runtime's config.GetConfig, kubectl) reaches it.
const KubeconfigEnv = "KUBECONFIG"

// RunMain is the body of a TestMain: it starts one control plane for the
// test package, calls each setup function with it (to keep the *Env in a
// package variable, install CRDs, ...), runs the tests and stops it:
//
//	var env *testenv.Env
//
//	func TestMain(m *testing.M) {
//		os.Exit(testenv.RunMain(m, testenv.Options{Scheduler: true, Kwok: true, Nodes: 2},
//			func(e *testenv.Env) error { env = e; return nil }))
//	}
//
// No component outlives the test binary: Stop runs after the tests and on
// SIGINT/SIGTERM, and the components die with the process if it is killed
// or a test panics. When tests fail the component logs are kept and their
// directory is printed. It also sets controller-runtime's logger (see
// SetLogger).
func RunMain(m *testing.M, opts Options, setup ...func(*Env) error) int {
	SetLogger(os.Stderr)
	env, err := Start(context.Background(), opts)
	if err != nil {
		fmt.Fprintf(os.Stderr, "testenv: start control plane: %v\n", err)
		return 1
	}
	if err := os.Setenv(KubeconfigEnv, env.Kubeconfig); err != nil {
		fmt.Fprintf(os.Stderr, "testenv: set %s: %v\n", KubeconfigEnv, err)
		return failed(env, 1)
	}

	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, syscall.SIGINT, syscall.SIGTERM)
	defer func() {
		signal.Stop(sigs)
		close(sigs)
	}()
	go func() {
		s, ok := <-sigs
		if !ok {
			return
		}
		fmt.Fprintf(os.Stderr, "testenv: %v: stopping control plane in %s\n", s, env.Dir)
		_ = env.Stop()
		os.Exit(1)
	}()

	for _, f := range setup {
		if err := f(env); err != nil {
			fmt.Fprintf(os.Stderr, "testenv: setup: %v\n", err)
			return failed(env, 1)
		}
	}
	code := m.Run()
	if code != 0 {
		return failed(env, code)
	}
	if err := env.Stop(); err != nil {
		fmt.Fprintf(os.Stderr, "testenv: stop control plane: %v\n", err)
		return 1
	}
	return 0
}

// failed stops env keeping its logs, tells where they are and returns code.
func failed(env *Env, code int) int {
	if err := env.stop(true); err != nil {
		fmt.Fprintf(os.Stderr, "testenv: stop control plane: %v\n", err)
	}
	fmt.Fprintf(os.Stderr, "testenv: control plane logs: %s\n", env.LogDir())
	return code
}
