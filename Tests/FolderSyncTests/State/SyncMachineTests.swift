import ConcordTestSupport
import FileWatching
import Foundation
import Testing

@testable import FolderSync

/// Sync's transitions, without a store or a container: what each event does to the state and
/// what it asks ``FolderSync`` to do.
@Suite("Sync machine")
struct SyncMachineTests {
    /// A machine that joined a container and syncs.
    func syncing() throws -> SyncMachine {
        var machine = SyncMachine()
        let started = machine.generation
        let joined = machine.joined(since: started)
        #expect(try #require(joined) == [.announce(.syncing)])
        #expect(machine.state == .syncing)
        return machine
    }

    @Test("an unusable container is reported once per availability; a check of an earlier wait does nothing")
    func waitingForTheContainer() {
        var machine = SyncMachine()
        #expect(
            machine.containerUnavailable(.missing) == [
                .reportUnavailable(.missing), .announce(.waitingForContainer(.missing)),
            ]
        )
        let wait = machine.generation
        // The same again, from a check of this wait: nothing to say, the wait goes on.
        #expect(machine.containerUnavailable(.missing, wait: wait) == [])
        #expect(machine.isWaiting(since: wait))
        // Another cause: reported, still the same wait (its checks stay current).
        #expect(
            machine.containerUnavailable(.readOnly, wait: wait)
                == [.reportUnavailable(.readOnly), .announce(.waitingForContainer(.readOnly))]
        )
        #expect(machine.state == .waitingForContainer(.readOnly))
        #expect(machine.isWaiting(since: wait))
        // Paused meanwhile: the wait's check finds it is no longer current and changes nothing.
        #expect(machine.pause() == [.stopResetWatching, .announce(.paused)])
        #expect(!machine.isWaiting(since: wait))
        #expect(machine.containerUnavailable(.missing, wait: wait) == nil)
        #expect(machine.state == .paused)
    }

    @Test("a join finishes into syncing only if nothing paused, disabled or stopped sync meanwhile")
    func joinInterrupted() throws {
        for interrupt in [
            { (machine: inout SyncMachine) in _ = machine.pause() },
            { (machine: inout SyncMachine) in _ = machine.disable() },
            { (machine: inout SyncMachine) in _ = machine.stop() },
        ] {
            var machine = SyncMachine()
            _ = machine.containerUnavailable(.missing)
            let started = machine.generation
            interrupt(&machine)
            let state = machine.state
            #expect(machine.joined(since: started) == nil)
            #expect(machine.state == state)
        }
        // Uninterrupted, after a wait: syncing, and the next wait reports again.
        var machine = SyncMachine()
        _ = machine.containerUnavailable(.missing)
        #expect(machine.joined(since: machine.generation) == [.announce(.syncing)])
        let stopped = machine.resetConfirmed(.containerDeleted)
        #expect(stopped.contains(.stopResetWatching))
        let reported = machine.containerUnavailable(.missing)
        #expect(reported?.first == .reportUnavailable(.missing))
    }

    @Test("disable and stop stop an enable in progress even when the state was already off")
    func disableFromOff() {
        var machine = SyncMachine()
        let started = machine.generation
        #expect(machine.disable() == [.stopResetWatching, .unregister, .announce(.off)])
        #expect(machine.joined(since: started) == nil)
        let again = machine.generation
        #expect(machine.stop() == [.stopResetWatching])
        #expect(machine.joined(since: again) == nil)
        #expect(machine.state == .off)
    }

    @Test("pause: from syncing or waiting, not from off, paused or a reset")
    func pausing() throws {
        var machine = try syncing()
        #expect(machine.pause() == [.stopResetWatching, .announce(.paused)])
        #expect(machine.pause() == [])
        var off = SyncMachine()
        #expect(off.pause() == [])
        var reset = try syncing()
        _ = reset.resetConfirmed(.registrationRemoved)
        #expect(reset.pause() == [])
        #expect(reset.state == .reset(.registrationRemoved))
    }

    @Test("a reset stops sync once, and only while it runs")
    func resets() throws {
        var machine = try syncing()
        #expect(
            machine.resetConfirmed(.containerReplaced)
                == [.stopResetWatching, .reportReset(.containerReplaced), .announce(.reset(.containerReplaced))]
        )
        #expect(machine.resetConfirmed(.containerDeleted) == [])
        #expect(machine.state == .reset(.containerReplaced))
        var paused = try syncing()
        _ = paused.pause()
        #expect(paused.resetConfirmed(.containerDeleted) == [])
    }

    @Test("reset checks asked for while one is queued are that one; none while not syncing")
    func resetChecks() throws {
        var idle = SyncMachine()
        #expect(idle.requestResetCheck() == [])
        var machine = try syncing()
        #expect(machine.requestResetCheck() == [.checkReset])
        #expect(machine.requestResetCheck() == [])
        machine.resetCheckBegins()
        #expect(machine.requestResetCheck() == [.checkReset])
    }

    @Test("live sync that cannot start after a join leaves sync off")
    func startFailure() throws {
        var machine = try syncing()
        #expect(machine.startFailed() == [.stopResetWatching])
        #expect(machine.state == .off)
    }

    // MARK: Every state and every event

    /// A machine in each lifecycle state, with a live run.
    func machines() throws -> [(SyncState, SyncMachine)] {
        var off = SyncMachine()
        var waiting = SyncMachine()
        _ = waiting.containerUnavailable(.missing)
        var syncing = try syncing()
        var paused = try self.syncing()
        _ = paused.pause()
        var reset = try self.syncing()
        _ = reset.resetConfirmed(.containerDeleted)
        var all = [off, waiting, syncing, paused, reset]
        for index in all.indices { _ = all[index].startRun(rescanInterval: .milliseconds(50)) }
        (off, waiting, syncing, paused, reset) = (all[0], all[1], all[2], all[3], all[4])
        return [
            (.off, off), (.waitingForContainer(.missing), waiting), (.syncing, syncing), (.paused, paused),
            (.reset(.containerDeleted), reset),
        ]
    }

    @Test("every state × every lifecycle event: the state reached, and whether the live run ends")
    func stateByEvent() throws {
        typealias Event = (name: String, apply: (inout SyncMachine) -> [SyncMachine.Action]?)
        let events: [Event] = [
            ("pause", { $0.pause() }),
            ("disable", { $0.disable() }),
            ("stop", { $0.stop() }),
            ("reset", { $0.resetConfirmed(.registrationRemoved) }),
            ("unavailable", { $0.containerUnavailable(.readOnly) }),
            ("joined", { machine in machine.joined(since: machine.generation) }),
            ("start failed", { $0.startFailed() }),
        ]
        for (state, start) in try machines() {
            for event in events {
                var machine = start
                let actions = event.apply(&machine) ?? []
                let expected: SyncState
                switch (event.name, state) {
                case ("pause", .syncing), ("pause", .waitingForContainer): expected = .paused
                case ("pause", _): expected = state
                case ("disable", _), ("stop", _), ("start failed", _): expected = .off
                case ("reset", .syncing): expected = .reset(.registrationRemoved)
                case ("reset", _): expected = state
                case ("unavailable", _): expected = .waitingForContainer(.readOnly)
                case ("joined", _): expected = .syncing
                default:
                    Issue.record("no expectation for \(event.name)")
                    continue
                }
                #expect(machine.state == expected, "\(state) + \(event.name)")
                // A disable, a stop, a failed start, a pause of running sync and a reset of
                // syncing stand sync down: reset watching stops and the live run ends, releasing
                // what it held. Nothing else does.
                let running = state == .syncing || state == .waitingForContainer(.missing)
                let stoodDown =
                    ["disable", "stop", "start failed"].contains(event.name)
                    || (event.name == "pause" && running) || (event.name == "reset" && state == .syncing)
                #expect(actions.contains(.stopResetWatching) == stoodDown, "\(state) + \(event.name)")
                #expect(machine.isLive == !stoodDown, "\(state) + \(event.name)")
                #expect(
                    actions.contains { if case .endRun = $0 { return true } else { return false } } == stoodDown,
                    "\(state) + \(event.name)"
                )
                // Told of every change of state (a stop, and live sync failing to start, say
                // nothing), and of nothing else, except that a disable and a finished join always
                // say where sync stands.
                let announced = actions.compactMap { if case .announce(let s) = $0 { return s } else { return nil } }
                let silent = event.name == "stop" || event.name == "start failed"
                let always = event.name == "disable" || event.name == "joined"
                let expectedAnnouncements = !silent && (machine.state != state || always) ? [machine.state] : []
                #expect(announced == expectedAnnouncements, "\(state) + \(event.name)")
            }
        }
    }

    // MARK: The live run

    @Test("a run queues one export and one import at a time, and nothing before it starts or after it ends")
    func runQueue() {
        var machine = SyncMachine()
        #expect(machine.requestExport() == [])
        #expect(machine.requestImport() == [])
        #expect(machine.requestRescan() == [])
        let starts = [
            machine.startRun(rescanInterval: .milliseconds(40)), machine.startRun(rescanInterval: .milliseconds(40)),
        ]
        #expect(starts == [1, nil])
        #expect(machine.requestExport() == [.export(run: 1)])
        #expect(machine.requestExport() == [])
        #expect(machine.requestImport() == [.importAvailable(run: 1)])
        #expect(machine.requestImport() == [])
        // Once begun, one more may be queued (saves that came while it runs).
        let exportBegan = machine.exportBegins(run: 1)
        #expect(exportBegan)
        #expect(machine.requestExport() == [.export(run: 1)])
        let importBegan = machine.importBegins(run: 1)
        #expect(importBegan)
        #expect(machine.requestImport() == [.importAvailable(run: 1)])
        // Ended: what was queued does nothing when it comes, also once a new run is on (which
        // queues its own, and keeps it queued).
        #expect(machine.endRun() != nil)
        #expect(machine.endRun() == nil)
        let begunAfterTheEnd = [machine.exportBegins(run: 1), machine.importBegins(run: 1)]
        #expect(begunAfterTheEnd == [false, false])
        #expect(machine.startRun(rescanInterval: .milliseconds(40)) == 2)
        #expect(machine.requestExport() == [.export(run: 2)])
        let begunInTheNextRun = machine.exportBegins(run: 1)
        #expect(!begunInTheNextRun)
        #expect(machine.requestExport() == [], "the second run's export is still queued")
        // A failed start ends its own run only.
        #expect(machine.endRun(1) == nil)
        #expect(machine.isLive)
        #expect(machine.endRun(2) != nil)
    }

    @Test("waiting for queued work exports the saves waiting for a pause in saving, once")
    func flushWaitingSaves() {
        var machine = SyncMachine()
        let schedule = SyncMachine.ExportSchedule(
            quiet: .milliseconds(25),
            longest: .milliseconds(250),
            linger: .seconds(1)
        )
        #expect(machine.flushWaitingSaves() == [])
        _ = machine.startRun(rescanInterval: .milliseconds(40))
        #expect(machine.flushWaitingSaves() == [])
        _ = machine.noteSave(at: .now, schedule: schedule)
        #expect(machine.flushWaitingSaves() == [.export(run: 1)])
        #expect(machine.flushWaitingSaves() == [])
    }

    @Test("a reset in sight holds the work that saw it, once confirmed a grace period later stops sync")
    func resetObservations() throws {
        var machine = try syncing()
        machine.resetGracePeriod = .milliseconds(250)
        let start = ContinuousClock.now
        #expect(machine.observeReset(nil, at: start) == .proceed)
        #expect(machine.observeReset(.registrationRemoved, at: start) == .hold(lookAgainAfter: .milliseconds(250)))
        // A look is scheduled: the next sighting holds without another.
        #expect(
            machine.observeReset(.registrationRemoved, at: start + .milliseconds(100)) == .hold(lookAgainAfter: nil)
        )
        machine.lookingAgainForReset()
        #expect(
            machine.observeReset(.registrationRemoved, at: start + .milliseconds(250)) == .stop(.registrationRemoved)
        )
        #expect(machine.resetConfirmed(.registrationRemoved).contains(.reportReset(.registrationRemoved)))
        // Gone before the grace period ended: nothing was a reset.
        var again = try syncing()
        _ = again.observeReset(.registrationRemoved, at: start)
        #expect(again.observeReset(nil, at: start + .milliseconds(100)) == .proceed)
        #expect(again.state == .syncing)
    }

    @Test("a re-scan pending when a run ends does not hold back the next run's re-scans")
    func rescansAcrossRuns() {
        var machine = SyncMachine()
        _ = machine.startRun(rescanInterval: .milliseconds(40))
        let first = machine.requestRescan()
        #expect(first == [.rescan(after: .milliseconds(40), run: 1)])
        #expect(machine.requestRescan() == [])
        _ = machine.endRun()
        _ = machine.startRun(rescanInterval: .milliseconds(60))
        // The new run schedules its own, and the old one's timer does nothing.
        #expect(machine.requestRescan() == [.rescan(after: .milliseconds(60), run: 2)])
        #expect(machine.rescanDue(run: 1) == [])
        #expect(machine.rescanDue(run: 2) == [.export(run: 2), .importAvailable(run: 2)])
        #expect(machine.requestRescan() == [.rescan(after: .milliseconds(60), run: 2)])
    }

    @Test("a run's watch is released when the run ends; one set up after its run ended is handed back")
    func watches() throws {
        let directory = TemporaryDirectory("machine-watch")
        let watcher = try InotifyWatcher()
        let watch = try watcher.watch(directory.url, recursive: false) { _ in }
        defer { watch.cancel() }
        var machine = try syncing()
        let started = machine.startRun(rescanInterval: .milliseconds(40))
        let first = try #require(started)
        let kept = machine.runWatches(watch, sharedWatcher: true, run: first)
        #expect(kept)
        #expect(machine.pause().contains(.endRun(.init(watch: watch, sharedWatcher: true))))
        // A stop and another start while the first start set its watch up: the watch is handed
        // back, and the run on keeps none.
        let restarted = machine.startRun(rescanInterval: .milliseconds(40))
        let second = try #require(restarted)
        _ = machine.stop()
        _ = machine.startRun(rescanInterval: .milliseconds(40))
        let keptAfterTheEnd = machine.runWatches(watch, sharedWatcher: false, run: second)
        #expect(!keptAfterTheEnd)
        #expect(machine.run?.watch == nil)
    }

    @Test(
        "a failure is reported at warning once while it repeats; maintenance is due once per interval while a run is on"
    )
    func failuresAndMaintenance() {
        var machine = SyncMachine()
        let start = ContinuousClock.now
        let repeated = [
            machine.failed("export failed: x"), machine.failed("export failed: x"), machine.failed("import failed: y"),
        ]
        #expect(repeated == [false, true, false])
        // No run: a success clears the failure, and no maintenance is due.
        let afterSuccess = [machine.succeeded(at: start), machine.failed("import failed: y")]
        #expect(afterSuccess == [false, false])
        _ = machine.startRun(rescanInterval: .milliseconds(40))
        machine.maintenanceInterval = .seconds(10)
        let due = [start, start + .seconds(9), start + .seconds(10)].map { machine.succeeded(at: $0) }
        #expect(due == [true, false, true])
        // An export waiting for the container: reported once per cause.
        let waitedAlike = ["readOnly|/c", "readOnly|/c", nil, "readOnly|/c"].map { machine.exportDeferred($0) }
        #expect(waitedAlike == [false, true, false, false])
    }
}
