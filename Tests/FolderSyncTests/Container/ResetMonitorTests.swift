import Testing

@testable import FolderSync

/// The reset monitor's transitions, without a container: a reset is confirmed only when it is
/// still seen a grace period after it was first seen, and one look is scheduled at a time.
@Suite("Reset monitor")
struct ResetMonitorTests {
    let start = ContinuousClock.now

    func at(_ milliseconds: Int) -> ContinuousClock.Instant { start.advanced(by: .milliseconds(milliseconds)) }

    @Test("nothing in sight: sync goes on, and nothing is scheduled")
    func nothingSeen() {
        var monitor = ResetMonitor()
        #expect(monitor.observe(nil, at: at(0)) == .proceed)
        #expect(monitor.suspectedSince == nil)
        #expect(!monitor.lookScheduled)
    }

    @Test("a reset first seen holds sync and schedules one look, at the end of the grace period")
    func firstSighting() {
        var monitor = ResetMonitor(gracePeriod: .milliseconds(250))
        #expect(monitor.observe(.registrationRemoved, at: at(0)) == .hold(lookAgainAfter: .milliseconds(250)))
        // Seen again before the look ran: still held, no second look.
        #expect(monitor.observe(.registrationRemoved, at: at(100)) == .hold(lookAgainAfter: nil))
        #expect(monitor.lookScheduled)
    }

    @Test("still seen when the grace period is over: sync stops, for the reason seen last")
    func confirmed() {
        var monitor = ResetMonitor(gracePeriod: .milliseconds(250))
        _ = monitor.observe(.registrationRemoved, at: at(0))
        monitor.lookingAgain()
        // A container deleted file by file loses the registration first, then the folder.
        #expect(monitor.observe(.containerDeleted, at: at(250)) == .stop(.containerDeleted))
        #expect(monitor.suspectedSince == nil)
    }

    @Test("a look before the grace period is over schedules the next one for what is left")
    func earlyLook() {
        var monitor = ResetMonitor(gracePeriod: .milliseconds(250))
        _ = monitor.observe(.registrationRemoved, at: at(0))
        monitor.lookingAgain()
        #expect(monitor.observe(.registrationRemoved, at: at(200)) == .hold(lookAgainAfter: .milliseconds(50)))
    }

    @Test("a reset that goes away (a registration deleted and written again) is forgotten: the next one starts over")
    func goneAway() {
        var monitor = ResetMonitor(gracePeriod: .milliseconds(250))
        _ = monitor.observe(.registrationRemoved, at: at(0))
        monitor.lookingAgain()
        #expect(monitor.observe(nil, at: at(200)) == .proceed)
        #expect(monitor.suspectedSince == nil)
        // Seen again later: a whole grace period from now, not from the first sighting.
        #expect(monitor.observe(.registrationRemoved, at: at(400)) == .hold(lookAgainAfter: .milliseconds(250)))
        monitor.lookingAgain()
        #expect(monitor.observe(.registrationRemoved, at: at(500)) == .hold(lookAgainAfter: .milliseconds(150)))
    }

    @Test("a zero grace period stops at the first sighting")
    func noGrace() {
        var monitor = ResetMonitor(gracePeriod: .zero)
        #expect(monitor.observe(.containerReplaced, at: at(0)) == .stop(.containerReplaced))
    }
}
