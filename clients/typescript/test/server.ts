// Starts the real `hourglass serve` binary on 127.0.0.1 with a random port and a temporary data
// directory, for the tests. The binary is $HOURGLASS_BIN, or built from the repository with go build.

import { spawn, execFileSync, type ChildProcess } from "node:child_process";
import { mkdtempSync, readFileSync, rmSync } from "node:fs";
import { get } from "node:https";
import { tmpdir } from "node:os";
import { join, resolve } from "node:path";
import { fileURLToPath } from "node:url";

const repo = resolve(fileURLToPath(import.meta.url), "../../../../.."); // from build-test/test/

export interface Server {
  /** http://127.0.0.1:PORT, or https:// with tls */
  url: string;
  /** With tls: the server's self-signed certificate (PEM), the CA a client trusts. */
  ca?: string;
  /** What the server wrote to stderr so far. */
  log(): string;
  stop(): Promise<void>;
}

function binary(dir: string): string {
  if (process.env.HOURGLASS_BIN) return process.env.HOURGLASS_BIN;
  const bin = join(dir, "hourglass");
  execFileSync("go", ["build", "-o", bin, "./cmd/hourglass"], { cwd: repo, stdio: "inherit" });
  return bin;
}

/** Waits for cond with a deadline, checking every few milliseconds. */
export async function waitFor(what: string, cond: () => boolean | Promise<boolean>, ms = 20000): Promise<void> {
  const deadline = Date.now() + ms;
  while (!(await cond())) {
    if (Date.now() > deadline) throw new Error(`timed out after ${ms}ms waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 5));
  }
}

/** A self-signed certificate for 127.0.0.1, made with openssl in dir: [cert, key] paths. */
function selfSigned(dir: string): [string, string] {
  const [cert, key] = [join(dir, "cert.pem"), join(dir, "key.pem")];
  execFileSync("openssl", ["req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes", "-days", "1",
    "-subj", "/CN=127.0.0.1", "-addext", "subjectAltName=IP:127.0.0.1", "-keyout", key, "-out", cert], { stdio: "ignore" });
  return [cert, key];
}

/** Whether GET url answers 200, trusting ca for https. */
function ok200(url: string, ca?: string): Promise<boolean> {
  if (!ca) return fetch(url).then((r) => r.status === 200, () => false);
  return new Promise((resolve) => {
    get(url, { ca }, (res) => {
      res.resume();
      resolve(res.statusCode === 200);
    }).on("error", () => resolve(false));
  });
}

/** Starts the server with args; with tls, on a self-signed certificate (--tls-cert, --tls-key). */
export async function startServer(args: string[], opts: { tls?: boolean } = {}): Promise<Server> {
  const dir = mkdtempSync(join(tmpdir(), "hourglass-ts-"));
  const bin = binary(dir);
  let ca: string | undefined;
  if (opts.tls) {
    const [cert, key] = selfSigned(dir);
    ca = readFileSync(cert, "utf8");
    args = [...args, "--tls-cert", cert, "--tls-key", key];
  }
  const proc: ChildProcess = spawn(bin, ["serve", "--listen", "127.0.0.1:0", "--data-dir", join(dir, "data"), "--fsync", "none", ...args], {
    stdio: ["ignore", "pipe", "pipe"],
  });
  let out = "";
  const exited = new Promise<void>((resolve) => proc.on("exit", () => resolve()));
  const addr = await new Promise<string>((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error(`the server printed no address in 30s:\n${out}`)), 30000);
    const onData = (b: Buffer) => {
      out += b.toString();
      const m = /listening on (\S+)/.exec(out);
      if (m) {
        clearTimeout(timer);
        resolve(m[1]);
      }
    };
    proc.stdout!.on("data", onData);
    proc.stderr!.on("data", onData);
    proc.on("exit", (code) => {
      clearTimeout(timer);
      reject(new Error(`the server exited (${code}) before listening:\n${out}`));
    });
  });
  const url = `${ca ? "https" : "http"}://${addr}`;
  await waitFor("/readyz to answer 200", () => ok200(`${url}/readyz`, ca));
  return {
    url,
    ca,
    log: () => out,
    stop: async () => {
      proc.kill("SIGTERM");
      await exited;
      rmSync(dir, { recursive: true, force: true });
    },
  };
}
