import ConcordTestSupport
import Foundation
import Testing

@testable import FolderSync

/// When live sync writes a local save's log: once saves pause, by a chain of checks on the sync
/// queue that goes on for a while after the last save, so that a save in a run of saves wakes no
/// thread. The machine's decisions first, then the engine end to end.
@Suite("Live export schedule")
struct LiveExportScheduleTests {
    let quiet = Duration.milliseconds(25)
    let longest = Duration.milliseconds(250)
    let linger = Duration.seconds(1)
    var schedule: SyncMachine.ExportSchedule { .init(quiet: quiet, longest: longest, linger: linger) }

    /// A machine whose first live run is on.
    func running() -> SyncMachine {
        var machine = SyncMachine()
        _ = machine.startRun(rescanInterval: .seconds(1))
        return machine
    }

    /// A local save: the run whose check chain it starts (`nil`: none starts).
    func save(_ machine: inout SyncMachine, at now: ContinuousClock.Instant) -> UInt64? {
        for case .checkExports(let after, let run) in machine.noteSave(at: now, schedule: schedule) {
            #expect(after == quiet)
            return run
        }
        return nil
    }

    /// A check of run `run`'s chain: whether it exports (the export then begins on the queue), and
    /// when it looks again.
    func due(
        _ machine: inout SyncMachine,
        at now: ContinuousClock.Instant,
        run: UInt64 = 1
    )
        -> (export: Bool, next: Duration?)
    {
        let actions = machine.checkExports(at: now, run: run, schedule: schedule)
        let export = actions.contains(.export(run: run))
        if export { _ = machine.exportBegins(run: run) }
        var next: Duration?
        for case .checkExports(let after, let number) in actions {
            #expect(number == run)
            next = after
        }
        return (export, next)
    }

    @Test("the first save starts one chain of checks; saves while it runs start none")
    func oneChain() {
        var stopped = SyncMachine()
        #expect(save(&stopped, at: .now) == nil)
        var machine = running()
        let start = ContinuousClock.now
        #expect(save(&machine, at: start) == 1)
        #expect(save(&machine, at: start + .milliseconds(5)) == nil)
        // Saves still coming: look again once the last one is a quiet period old.
        let early = due(&machine, at: start + .milliseconds(10))
        #expect(!early.export)
        #expect(early.next == .milliseconds(20))
        // Saves paused: export, and keep looking.
        let paused = due(&machine, at: start + .milliseconds(30))
        #expect(paused.export)
        #expect(paused.next == quiet)
        #expect(machine.run?.firstWaitingSave == nil)
    }

    @Test("a save that keeps the saves coming waits at most the longest wait")
    func longestWait() {
        var machine = running()
        let start = ContinuousClock.now
        _ = save(&machine, at: start)
        var now = start
        var exported = false
        while now < start + .milliseconds(400) {
            now += .milliseconds(10)
            _ = save(&machine, at: now)
            if due(&machine, at: now).export {
                exported = true
                break
            }
        }
        #expect(exported)
        #expect(now - start >= longest)
        #expect(now - start < longest + .milliseconds(20))
    }

    @Test("with nothing waiting the chain lingers, then ends; the next save starts a new one")
    func lingerThenEnd() {
        var machine = running()
        let start = ContinuousClock.now
        _ = save(&machine, at: start)
        #expect(due(&machine, at: start + quiet).export)
        // Nothing waits, the last save is recent: look again, export nothing.
        let lingering = due(&machine, at: start + .milliseconds(500))
        #expect(!lingering.export)
        #expect(lingering.next == quiet)
        #expect(save(&machine, at: start + .milliseconds(510)) == nil)
        #expect(due(&machine, at: start + .milliseconds(540)).export)
        // A linger period after the last save: the chain ends, and a save starts another.
        let ended = due(&machine, at: start + .milliseconds(510) + linger)
        #expect(!ended.export)
        #expect(ended.next == nil)
        #expect(save(&machine, at: start + .seconds(3)) == 1)
    }

    @Test("a chain of an earlier run ends without touching this run's; stopping ends every chain")
    func generations() {
        var machine = running()
        let start = ContinuousClock.now
        _ = save(&machine, at: start)
        // Stopped and started again: the old chain's next check ends it, the new run's first save
        // starts its own.
        _ = machine.stop()
        #expect(!machine.isLive)
        let restarted = machine.startRun(rescanInterval: .seconds(1))
        #expect(restarted == 2)
        #expect(save(&machine, at: start + .milliseconds(1)) == 2)
        let stale = due(&machine, at: start + .milliseconds(40), run: 1)
        #expect(!stale.export)
        #expect(stale.next == nil)
        #expect(machine.run?.checking == true)
        #expect(machine.run?.firstWaitingSave != nil)
        #expect(due(&machine, at: start + .milliseconds(40), run: 2).export)
        // Stopping ends the run with its chain: a check that comes later does nothing.
        _ = machine.stop()
        #expect(machine.run == nil)
        #expect(due(&machine, at: start + .milliseconds(80), run: 2) == (false, nil))
    }

    @Test("live sync writes a save's log within the chain, after it ended, and stops looking in between")
    func endToEnd() throws {
        let bench = try LifecycleBench.syncing("alpha", "beta")
        let (alpha, beta) = (bench["alpha"], bench["beta"])
        try alpha.addNote("one")
        #expect(beta.waitForTitles(["one"]))
        // (Most likely within the linger period: the chain that wrote "one" writes "two".)
        try alpha.addNote("two")
        #expect(beta.waitForTitles(["one", "two"]))
        // The chain ends on its own a linger period after the last save.
        #expect(
            alpha.events.wait(timeout: .seconds(20)) { _ in
                alpha.sync.engine.machine.withLock { $0.run?.checking != true }
            }
        )
        try alpha.addNote("three")
        #expect(beta.waitForTitles(["one", "three", "two"]))
    }
}
