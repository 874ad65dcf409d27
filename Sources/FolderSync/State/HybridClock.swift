import Foundation
import Synchronization

/// A hybrid logical clock timestamp: wall-clock milliseconds, a counter for events within one
/// millisecond (or when the wall clock lags behind what the device has seen), and the device
/// that made it. Timestamps are totally ordered (time, then counter, then device), so every
/// device that compares two of them reaches the same answer: the basis of Concord's
/// last-writer-wins rules.
public struct SyncClock: Hashable, Comparable, Codable, Sendable, CustomStringConvertible {
    /// Milliseconds since 1970, as the writing device saw them (never less than any timestamp it
    /// had seen before).
    public var time: UInt64
    /// Orders events with the same `time`.
    public var counter: UInt32
    /// The device that made the timestamp.
    public var device: String

    /// A timestamp.
    public init(time: UInt64, counter: UInt32, device: String) {
        self.time = time
        self.counter = counter
        self.device = device
    }

    public static func < (a: SyncClock, b: SyncClock) -> Bool {
        if a.time != b.time { return a.time < b.time }
        if a.counter != b.counter { return a.counter < b.counter }
        return a.device.utf8.lexicographicallyPrecedes(b.device.utf8)
    }

    /// `time.counter@device`.
    public var description: String { "\(time).\(counter)@\(device)" }

    /// The latest time a timestamp may carry: the last millisecond of the year 9999. A log with a
    /// later one is damaged or hostile (applying it would move every device's clock to the end of
    /// its range, where no later write could win), and is refused the same way on every device.
    public static let latestTime: UInt64 = 253_402_300_799_999

    /// Whether the timestamp is within ``latestTime``.
    public var isPlausible: Bool { time <= Self.latestTime }

    /// The JSON a store keeps the device's clock in, as `JSONEncoder` writes it (every save writes
    /// one: made by hand when the device id needs no escaping, which a valid id never does).
    func jsonData() throws -> Data {
        guard ContainerLayout.isValidDeviceID(device) else { return try JSONEncoder().encode(self) }
        return Data(#"{"time":\#(time),"counter":\#(counter),"device":"\#(device)"}"#.utf8)
    }
}

/// The device's hybrid logical clock: each local change gets a timestamp greater than every
/// timestamp the device has made or seen, close to the wall clock when clocks agree.
public final class HybridClock: Sendable {
    /// The device whose timestamps this clock makes.
    public let device: String
    private let wallClock: @Sendable () -> UInt64
    private let state: Mutex<(time: UInt64, counter: UInt32)>

    /// A clock for `device`, starting after `last` (the latest timestamp the device knows of),
    /// reading wall time from `wallClock` (milliseconds since 1970; injectable for tests).
    public init(
        device: String,
        after last: SyncClock? = nil,
        wallClock: @escaping @Sendable () -> UInt64 = { UInt64(Date().timeIntervalSince1970 * 1000) }
    ) {
        self.device = device
        self.wallClock = wallClock
        state = Mutex((last?.time ?? 0, last?.counter ?? 0))
    }

    /// A new timestamp for a local change.
    public func tick() -> SyncClock {
        let wall = wallClock()
        let (time, counter) = state.withLock { state -> (UInt64, UInt32) in
            if wall > state.time {
                state = (wall, 0)
            } else if state.counter == .max {
                // (A counter this high comes only from a damaged or hostile log: move time on.)
                state = (state.time &+ 1, 0)
            } else {
                state.counter += 1
            }
            return state
        }
        return SyncClock(time: time, counter: counter, device: device)
    }

    /// Takes note of a timestamp made elsewhere, so later local ones come after it.
    public func observe(_ other: SyncClock) {
        state.withLock { state in
            if other.time > state.time || (other.time == state.time && other.counter > state.counter) {
                state = (other.time, other.counter)
            }
        }
    }

    /// The latest timestamp made or seen.
    public var latest: SyncClock {
        state.withLock { SyncClock(time: $0.time, counter: $0.counter, device: device) }
    }
}
