//go:build tools

// Package tools pins the command this module builds, so that `go mod tidy` keeps its dependencies.
package tools

import _ "github.com/kubeflow/trainer/v2/cmd/trainer-controller-manager"
