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

    func running() -> LiveSync.Machine {
        var machine = LiveSync.Machine()
        machine.running = true
        machine.generation = 7
        return machine
    }

    func due(
        _ machine: inout LiveSync.Machine,
        at now: ContinuousClock.Instant,
        generation: UInt64 = 7
    )
        -> (export: Bool, next: Duration?)
    {
        machine.exportDue(at: now, generation: generation, quiet: quiet, longest: longest, linger: linger)
    }

    @Test("the first save starts one chain of checks; saves while it runs start none")
    func oneChain() {
        var stopped = LiveSync.Machine()
        #expect(stopped.noteSave(at: .now) == nil)
        var machine = running()
        let start = ContinuousClock.now
        #expect(machine.noteSave(at: start) == 7)
        #expect(machine.noteSave(at: start + .milliseconds(5)) == nil)
        // Saves still coming: look again once the last one is a quiet period old.
        let early = due(&machine, at: start + .milliseconds(10))
        #expect(!early.export)
        #expect(early.next == .milliseconds(20))
        // Saves paused: export, and keep looking.
        let paused = due(&machine, at: start + .milliseconds(30))
        #expect(paused.export)
        #expect(paused.next == quiet)
        #expect(machine.firstWaitingSave == nil)
    }

    @Test("a save that keeps the saves coming waits at most the longest wait")
    func longestWait() {
        var machine = running()
        let start = ContinuousClock.now
        _ = machine.noteSave(at: start)
        var now = start
        var exported = false
        while now < start + .milliseconds(400) {
            now += .milliseconds(10)
            _ = machine.noteSave(at: now)
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
        _ = machine.noteSave(at: start)
        #expect(due(&machine, at: start + quiet).export)
        // Nothing waits, the last save is recent: look again, export nothing.
        let lingering = due(&machine, at: start + .milliseconds(500))
        #expect(!lingering.export)
        #expect(lingering.next == quiet)
        #expect(machine.noteSave(at: start + .milliseconds(510)) == nil)
        #expect(due(&machine, at: start + .milliseconds(540)).export)
        // A linger period after the last save: the chain ends, and a save starts another.
        let ended = due(&machine, at: start + .milliseconds(510) + linger)
        #expect(!ended.export)
        #expect(ended.next == nil)
        #expect(machine.noteSave(at: start + .seconds(3)) == 7)
    }

    @Test("a chain of an earlier run ends without touching this run's; stopping ends every chain")
    func generations() {
        var machine = running()
        let start = ContinuousClock.now
        _ = machine.noteSave(at: start)
        // Stopped and started again: the old chain's next check ends it, the new run's first save
        // starts its own.
        machine.running = false
        machine.checking = false
        machine.generation += 1
        machine.running = true
        #expect(machine.noteSave(at: start + .milliseconds(1)) == 8)
        let stale = due(&machine, at: start + .milliseconds(40), generation: 7)
        #expect(!stale.export)
        #expect(stale.next == nil)
        #expect(machine.checking)
        #expect(machine.firstWaitingSave != nil)
        #expect(due(&machine, at: start + .milliseconds(40), generation: 8).export)

        let live = LiveSync()
        live.machine.withLock { $0 = machine }
        _ = live.stop()
        live.machine.withLock { state in
            #expect(!state.checking)
            #expect(state.lastSave == nil)
        }
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
            alpha.events.wait(timeout: .seconds(20)) { _ in !alpha.sync.live.machine.withLock { $0.checking } }
        )
        try alpha.addNote("three")
        #expect(beta.waitForTitles(["one", "three", "two"]))
    }
}
