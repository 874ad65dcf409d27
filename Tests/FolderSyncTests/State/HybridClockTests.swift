import FolderSync
import Foundation
import Synchronization
import Testing

@Suite("Hybrid logical clocks")
struct HybridClockTests {
    /// A wall clock that a test sets.
    final class Wall: Sendable {
        let now = Mutex<UInt64>(1_000)
    }

    @Test("Ticks increase, follow the wall clock, and come after every stamp observed, even a counter at its limit")
    func ticksIncrease() {
        let wall = Wall()
        let clock = HybridClock(device: "a", wallClock: { wall.now.withLock { $0 } })
        let first = clock.tick()
        let second = clock.tick()
        #expect(first < second && second.time == 1_000 && second.counter == 1)
        wall.now.withLock { $0 = 2_000 }
        #expect(clock.tick() == SyncClock(time: 2_000, counter: 0, device: "a"))
        // A stamp from a clock that runs ahead.
        clock.observe(SyncClock(time: 5_000, counter: 3, device: "b"))
        let after = clock.tick()
        #expect(after.time == 5_000 && after.counter == 4)
        // A damaged or hostile log's counter at its limit: no trap, and still later.
        let extreme = SyncClock(time: 5_000, counter: .max, device: "b")
        clock.observe(extreme)
        let next = clock.tick()
        #expect(next > extreme && (next.time, next.counter) > (extreme.time, extreme.counter))
    }
}
