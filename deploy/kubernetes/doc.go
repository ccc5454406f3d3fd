// Package kubernetes holds manifests that run an rtserver fleet on
// Kubernetes and drain it properly (docs/operations.md, "Deploying on
// Kubernetes"):
//
//   - configmap.yaml: the fleet's configuration file (Redis through
//     Sentinel, drain.duration);
//   - deployment.yaml: readiness on /readyz, liveness on /healthz, a
//     preStop pause so endpoints update before the drain starts, and a
//     termination grace period above the drain, with its arithmetic;
//   - service.yaml: the clients' Service;
//   - pdb.yaml: a PodDisruptionBudget of one pod at a time.
//
// Apply them with kubectl apply -f deploy/kubernetes/ once the Secret
// they name exists. The package has no Go code to import; its test decodes
// every manifest strictly into the Kubernetes API types, so a misspelt
// field fails, loads the ConfigMap's file as the binary would, and checks
// that the ports, probes, labels and the drain arithmetic agree.
package kubernetes
