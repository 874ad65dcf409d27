import FolderSync
import Foundation

// What devices publish beside their logs (acknowledgements, requests for logs) and what the
// processes of one device leave in their store's metadata for each other (record clocks, the
// hybrid clock, applied positions): read back by other processes and devices.

extension FuzzTarget {
    /// A record's clocks as the store's metadata keeps them (`sync.r.<id>`): binary, or JSON as
    /// earlier versions kept them. They round-trip, and the queries compaction makes of them
    /// (alive, latest) answer.
    static let recordClocks = FuzzTarget(
        "record-clocks",
        "RecordClocks.decode: a record's clocks in a store's metadata"
    ) { data, url throws(FuzzFinding) in
        let clocks: RecordClocks
        do {
            clocks = try RecordClocks.decode(data)
        } catch {
            return .rejected(error, namedFile: nil)
        }
        _ = (clocks.isAlive, clocks.latest)
        let again = try must("record-clocks", "decoding the re-encoded clocks") {
            try RecordClocks.decode(clocks.encoded())
        }
        try check(again.encoded() == clocks.encoded(), "record-clocks", "decoded clocks change in a round trip")
        return .decoded
    }

    /// The hybrid clock a device keeps in its store's metadata (`sync.out/clock`, JSON) and publishes
    /// in its acknowledgement: after observing it, the next local timestamp comes after it
    /// (unless it is at the very end of time, where the clock must wrap: see the report of
    /// issue 16).
    static let hybridClock = FuzzTarget("hybrid-clock", "SyncClock (JSON) and HybridClock.observe/tick") {
        data,
        url throws(FuzzFinding) in
        let stored: SyncClock
        do {
            stored = try JSONDecoder().decode(SyncClock.self, from: data)
        } catch {
            return .rejected(error, namedFile: nil)
        }
        let again = try must("hybrid-clock", "the round trip") {
            try JSONDecoder().decode(SyncClock.self, from: JSONEncoder().encode(stored))
        }
        try check(again == stored, "hybrid-clock", "a clock changes in a round trip")
        let clock = HybridClock(device: "fuzz", after: stored, wallClock: { 0 })
        let fresh = HybridClock(device: "fuzz", wallClock: { 0 })
        fresh.observe(stored)
        for hybrid in [clock, fresh] {
            let next = hybrid.tick()
            if stored.time < .max {
                try check(
                    (next.time, next.counter) > (stored.time, stored.counter),
                    "hybrid-clock",
                    "tick \(next) does not come after \(stored)"
                )
            }
        }
        return .decoded
    }

    /// A device's acknowledgement (`applied.json` in its folder): what compaction and tombstone
    /// collection trust about other devices. It round-trips.
    static let acknowledgement = FuzzTarget("acknowledgement", "SyncAcknowledgement: a device's applied.json") {
        data,
        url throws(FuzzFinding) in
        let decoded: SyncAcknowledgement
        do {
            decoded = try JSONDecoder().decode(SyncAcknowledgement.self, from: data)
        } catch {
            return .rejected(error, namedFile: nil)
        }
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.sortedKeys]
        let again = try must("acknowledgement", "the round trip") {
            try JSONDecoder().decode(SyncAcknowledgement.self, from: encoder.encode(decoded))
        }
        try check(again == decoded, "acknowledgement", "an acknowledgement changes in a round trip")
        return .decoded
    }

    /// The logs of one device a store has applied (`sync.applied.<device>` in its metadata, JSON),
    /// shared by the processes of one device: it round-trips, and inserting the next log works
    /// on whatever was read.
    static let appliedLogs = FuzzTarget(
        "applied-logs",
        "AppliedLogs: applied positions in a store's metadata"
    ) { data, url throws(FuzzFinding) in
        let decoded: AppliedLogs
        do {
            decoded = try JSONDecoder().decode(AppliedLogs.self, from: data)
        } catch {
            return .rejected(error, namedFile: nil)
        }
        let again = try must("applied-logs", "the round trip") {
            try JSONDecoder().decode(AppliedLogs.self, from: JSONEncoder().encode(decoded))
        }
        try check(again == decoded, "applied-logs", "applied positions change in a round trip")
        return .decoded
    }

    /// A device's requests for logs it cannot read (`requests.json` in its folder), as the
    /// devices asked read them (production reads at most 1 MiB). They round-trip.
    static let requests = FuzzTarget("requests", "SyncLogRequests: a device's requests.json") {
        data,
        url throws(FuzzFinding) in
        guard data.count < 1 << 20 else { return .rejected(FuzzInputTooLarge(count: data.count), namedFile: nil) }
        let decoded: SyncLogRequests
        do {
            decoded = try JSONDecoder().decode(SyncLogRequests.self, from: data)
        } catch {
            return .rejected(error, namedFile: nil)
        }
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.sortedKeys]
        let again = try must("requests", "the round trip") {
            try JSONDecoder().decode(SyncLogRequests.self, from: encoder.encode(decoded))
        }
        try check(again == decoded, "requests", "requests change in a round trip")
        // What answering them does first: the set of logs wanted from one device.
        _ = Set(decoded.logs.values.joined()).sorted()
        return .decoded
    }
}

/// The input is larger than production code reads.
struct FuzzInputTooLarge: Error, CustomStringConvertible {
    var count: Int
    var description: String { "\(count) bytes, more than production code reads" }
}
