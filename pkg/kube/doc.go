// Package kube builds the Kubernetes client configuration sluice services
// share: where the kubeconfig comes from, and client-side rate limits sized
// for sluice's write rates.
package kube
