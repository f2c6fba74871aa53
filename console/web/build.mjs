// Bundles the console into ../dist (console.js, console.css, index.html)
// with esbuild. The output depends only on the sources and the pinned
// packages: scripts/build-console.sh --check rebuilds it and diffs.
import * as esbuild from "esbuild";
import { copyFileSync, mkdirSync } from "node:fs";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";

const here = dirname(fileURLToPath(import.meta.url));
const out = process.argv[2] ?? join(here, "..", "dist");

// The API's generated code lives in clients/typescript, outside this
// package: its imports of @bufbuild/protobuf resolve to this package's
// copy, so that the bundle holds one copy whatever is installed there.
const ownProtobuf = {
  name: "own-protobuf",
  setup(build) {
    build.onResolve({ filter: /^@bufbuild\/protobuf(\/|$)/ }, (args) => {
      if (args.resolveDir.startsWith(here)) return undefined;
      return build.resolve(args.path, { kind: args.kind, resolveDir: here });
    });
  },
};

mkdirSync(out, { recursive: true });
await esbuild.build({
  entryPoints: { console: join(here, "src", "main.ts") },
  outdir: out,
  bundle: true,
  minify: true,
  format: "iife",
  target: ["es2022", "chrome110", "firefox110", "safari16"],
  legalComments: "eof",
  charset: "utf8",
  logLevel: "warning",
  plugins: [ownProtobuf],
});
copyFileSync(join(here, "index.html"), join(out, "index.html"));
