//go:build tools

// Package tools pins the etcd server command (its main package is the module
// root of go.etcd.io/etcd/server/v3), so that `go mod tidy` keeps its dependencies.
package tools

import (
	_ "go.etcd.io/etcd/server/v3"
)
