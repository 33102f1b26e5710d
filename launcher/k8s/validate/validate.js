#!/usr/bin/env node
// Validates Kubernetes manifests offline against the API schema (the kubernetes-models package:
// Kubernetes 1.27's OpenAPI types, required fields, enums and formats; it does not flag fields
// the schema does not know, as the API server's strict validation would).
//
//   node validate.js [PATH ...]     PATH: a YAML file, a folder (its *.yaml, *.yml), or - (stdin)
//
// Without PATH it validates the manifests of launcher/k8s/. Each YAML document must name an
// apiVersion and kind that kubernetes-models has; a Kustomization's resources must exist (and are
// validated by their own files). Prints one line per document; exits 1 naming each bad field
// (FILE: doc N Kind/name: /spec/... must be integer), 2 for an unreadable path.
"use strict";
const fs = require("fs");
const path = require("path");
const yaml = require("js-yaml");

// apiVersion "apps/v1" -> require("kubernetes-models/apps/v1"); the core group "v1" -> ".../v1".
function modelClass(apiVersion, kind) {
  let mod;
  try {
    mod = require(`kubernetes-models/${apiVersion}`);
  } catch (e) {
    return null;
  }
  return Object.prototype.hasOwnProperty.call(mod, kind) ? mod[kind] : null;
}

function describeErrors(e) {
  if (Array.isArray(e.errors) && e.errors.length > 0) {
    return e.errors.map((x) => {
      const where = x.instancePath || "/";
      const extra = x.params && x.params.missingProperty ? ` '${x.params.missingProperty}'` : "";
      const allowed = x.params && x.params.allowedValues ? ` (${x.params.allowedValues.join(", ")})` : "";
      return `${where} ${x.message}${extra}${allowed}`;
    });
  }
  return [e.message];
}

function validateKustomization(doc, file) {
  const dir = path.dirname(file);
  const problems = [];
  for (const r of doc.resources || []) {
    if (!fs.existsSync(path.join(dir, r))) problems.push(`/resources: '${r}' does not exist`);
  }
  return problems;
}

function validateText(text, file) {
  let docs;
  try {
    docs = yaml.loadAll(text);
  } catch (e) {
    return [`${file}: not YAML: ${e.message.split("\n")[0]}`];
  }
  const failures = [];
  docs.forEach((doc, i) => {
    if (doc === null || doc === undefined) return;  // an empty document (a trailing ---)
    const n = i + 1;
    const fail = (what, lines) => lines.forEach((l) => failures.push(`${file}: doc ${n} ${what}: ${l}`));
    if (typeof doc !== "object" || Array.isArray(doc)) return fail("", ["not a mapping"]);
    const { apiVersion, kind } = doc;
    const name = (doc.metadata && doc.metadata.name) || "(no name)";
    const what = `${kind}/${name}`;
    if (typeof apiVersion !== "string" || typeof kind !== "string") {
      return fail(what, ["/apiVersion and /kind are required strings"]);
    }
    if (apiVersion.startsWith("kustomize.config.k8s.io/") && kind === "Kustomization") {
      const problems = validateKustomization(doc, file);
      if (problems.length) return fail(what, problems);
      console.log(`ok   ${file}: doc ${n} ${what}`);
      return;
    }
    const Model = modelClass(apiVersion, kind);
    if (!Model) return fail(what, [`/kind: no ${kind} in API ${apiVersion}`]);
    try {
      new Model(doc).validate();
    } catch (e) {
      return fail(what, describeErrors(e));
    }
    console.log(`ok   ${file}: doc ${n} ${what}`);
  });
  return failures;
}

function filesOf(p) {
  if (p === "-") return ["-"];
  const st = fs.statSync(p);
  if (!st.isDirectory()) return [p];
  return fs.readdirSync(p).filter((f) => /\.ya?ml$/.test(f)).sort().map((f) => path.join(p, f));
}

function main(argv) {
  const paths = argv.length > 0 ? argv : [path.join(__dirname, "..")];
  let files;
  try {
    files = paths.flatMap(filesOf);
  } catch (e) {
    console.error(`validate.js: ${e.message}`);
    return 2;
  }
  if (files.length === 0) {
    console.error(`validate.js: no YAML files in ${paths.join(" ")}`);
    return 2;
  }
  const failures = [];
  for (const f of files) {
    const text = f === "-" ? fs.readFileSync(0, "utf8") : fs.readFileSync(f, "utf8");
    failures.push(...validateText(text, f === "-" ? "(stdin)" : f));
  }
  for (const l of failures) console.error(`BAD  ${l}`);
  if (failures.length) console.error(`validate.js: ${failures.length} problem(s)`);
  return failures.length ? 1 : 0;
}

process.exitCode = main(process.argv.slice(2));
