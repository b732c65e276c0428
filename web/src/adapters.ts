// The Adapters tab: checkpoints / adapters saved by each trial (step, time, path, size).

import { api, type Checkpoint, type RunDetail } from "./api";
import { h, replace } from "./dom";
import { fmtBytes, fmtDate, fmtElapsed } from "./format";
import { message, table } from "./widgets";

export class AdaptersTab {
  readonly el: HTMLElement;
  private dead = false;

  constructor(private readonly run: RunDetail) {
    this.el = h("section", { class: "card" }, message("info", "Loading checkpoints…"));
  }

  start(): void {
    void this.load();
  }

  destroy(): void {
    this.dead = true;
  }

  private async load(): Promise<void> {
    let lists: Checkpoint[][];
    try {
      lists = await Promise.all(this.run.trials.map((t) => api.checkpoints(t.id)));
    } catch (e) {
      if (!this.dead) replace(this.el, message("error", `Could not load checkpoints: ${(e as Error).message}`));
      return;
    }
    if (this.dead) return;
    const rows = this.run.trials.flatMap((t, i) => lists[i].map((c) => [
      t.name,
      c.step === null ? "—" : String(c.step),
      h("span", { title: fmtDate(c.t) }, fmtElapsed(c.t - this.run.start)),
      c.name ?? "—",
      h("code", { class: "path" }, c.path ?? "—"),
      fmtBytes(c.bytes),
    ]));
    replace(this.el,
      h("div", { class: "section-head" }, h("h2", {}, "Adapters and checkpoints"),
        h("span", { class: "muted" }, "time is elapsed since the run began; hover it for the clock time")),
      rows.length ? table("Checkpoints", ["Trial", "Step", "Time", "Name", "Path", "Size"], rows, [1, 5])
        : message("info", "No checkpoint or adapter was saved by this run's trials."));
  }
}
