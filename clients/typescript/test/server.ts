// Starts the real `hourglass serve` binary on 127.0.0.1 with a random port and a temporary data
// directory, for the tests. The binary is $HOURGLASS_BIN, or built from the repository with go build.

import { spawn, execFileSync, type ChildProcess } from "node:child_process";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join, resolve } from "node:path";
import { fileURLToPath } from "node:url";

const repo = resolve(fileURLToPath(import.meta.url), "../../../../.."); // from build-test/test/

export interface Server {
  /** http://127.0.0.1:PORT */
  url: string;
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

export async function startServer(args: string[]): Promise<Server> {
  const dir = mkdtempSync(join(tmpdir(), "hourglass-ts-"));
  const bin = binary(dir);
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
  const url = `http://${addr}`;
  await waitFor("/readyz to answer 200", async () => {
    try {
      return (await fetch(`${url}/readyz`)).status === 200;
    } catch {
      return false;
    }
  });
  return {
    url,
    log: () => out,
    stop: async () => {
      proc.kill("SIGTERM");
      await exited;
      rmSync(dir, { recursive: true, force: true });
    },
  };
}
