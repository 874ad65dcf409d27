import Testing

@testable import FolderSync

/// The lifecycle's transitions, without a store or a container: what each event does to the
/// state and what it asks ``FolderSync`` to do.
@Suite("Lifecycle machine")
struct LifecycleMachineTests {
    /// A machine that joined a container and syncs.
    func syncing() throws -> LifecycleMachine {
        var machine = LifecycleMachine()
        let started = machine.generation
        let joined = machine.joined(since: started)
        #expect(try #require(joined) == [.announce(.syncing)])
        #expect(machine.state == .syncing)
        return machine
    }

    @Test("an unusable container is reported once per availability; a check of an earlier wait does nothing")
    func waitingForTheContainer() {
        var machine = LifecycleMachine()
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
        #expect(machine.pause() == [.standDown, .announce(.paused)])
        #expect(!machine.isWaiting(since: wait))
        #expect(machine.containerUnavailable(.missing, wait: wait) == nil)
        #expect(machine.state == .paused)
    }

    @Test("a join finishes into syncing only if nothing paused, disabled or stopped sync meanwhile")
    func joinInterrupted() throws {
        for interrupt in [
            { (machine: inout LifecycleMachine) in _ = machine.pause() },
            { (machine: inout LifecycleMachine) in _ = machine.disable() },
            { (machine: inout LifecycleMachine) in _ = machine.stop() },
        ] {
            var machine = LifecycleMachine()
            _ = machine.containerUnavailable(.missing)
            let started = machine.generation
            interrupt(&machine)
            let state = machine.state
            #expect(machine.joined(since: started) == nil)
            #expect(machine.state == state)
        }
        // Uninterrupted, after a wait: syncing, and the next wait reports again.
        var machine = LifecycleMachine()
        _ = machine.containerUnavailable(.missing)
        #expect(machine.joined(since: machine.generation) == [.announce(.syncing)])
        let stopped = machine.resetConfirmed(.containerDeleted)
        #expect(stopped.contains(.standDown))
        let reported = machine.containerUnavailable(.missing)
        #expect(reported?.first == .reportUnavailable(.missing))
    }

    @Test("disable and stop stop an enable in progress even when the state was already off")
    func disableFromOff() {
        var machine = LifecycleMachine()
        let started = machine.generation
        #expect(machine.disable() == [.standDown, .unregister, .announce(.off)])
        #expect(machine.joined(since: started) == nil)
        let again = machine.generation
        #expect(machine.stop() == [.standDown])
        #expect(machine.joined(since: again) == nil)
        #expect(machine.state == .off)
    }

    @Test("pause: from syncing or waiting, not from off, paused or a reset")
    func pausing() throws {
        var machine = try syncing()
        #expect(machine.pause() == [.standDown, .announce(.paused)])
        #expect(machine.pause() == [])
        var off = LifecycleMachine()
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
                == [.standDown, .reportReset(.containerReplaced), .announce(.reset(.containerReplaced))]
        )
        #expect(machine.resetConfirmed(.containerDeleted) == [])
        #expect(machine.state == .reset(.containerReplaced))
        var paused = try syncing()
        _ = paused.pause()
        #expect(paused.resetConfirmed(.containerDeleted) == [])
    }

    @Test("reset checks asked for while one is queued are that one; none while not syncing")
    func resetChecks() throws {
        var idle = LifecycleMachine()
        let idleCheck = idle.requestResetCheck()
        #expect(!idleCheck)
        var machine = try syncing()
        let first = machine.requestResetCheck()
        #expect(first)
        let second = machine.requestResetCheck()
        #expect(!second)
        machine.resetCheckBegins()
        let third = machine.requestResetCheck()
        #expect(third)
    }

    @Test("live sync that cannot start after a join leaves sync off")
    func startFailure() throws {
        var machine = try syncing()
        #expect(machine.startFailed() == [.standDown])
        #expect(machine.state == .off)
    }
}
