import Foundation
import Persistence

extension ContainerDiagnosis {
    /// For each device, the position up to which some readable baseline covers its logs: logs at
    /// or below it may have been compacted away.
    static func baselineFloors(_ reading: StoreFolderReading) -> [String: UInt64] {
        var floors: [String: UInt64] = [:]
        for device in reading.diagnosis.devices {
            for baseline in device.baselines {
                for (covered, position) in baseline.covers { floors[covered] = max(floors[covered] ?? 0, position) }
            }
        }
        return floors
    }

    /// Sequences with no intact log (nor a conflict copy standing in) between `floor` and the
    /// last intact log, damaged ones excluded (they are reported as damaged), and numbers the
    /// device's numbering leapt over (a log that names an earlier one of its own device as the
    /// one it follows) too.
    static func gaps(
        logs: [UInt64: LogSummary],
        floor: UInt64,
        damaged: Set<UInt64>,
        device: String = "",
        limit: Int = 1000
    ) -> [UInt64] {
        guard let last = logs.keys.max(), last > floor else { return [] }
        var leapt: [ClosedRange<UInt64>] = []
        for (sequence, log) in logs {
            if let previous = log.dependencies[device], previous + 1 < sequence {
                leapt.append((previous + 1)...(sequence - 1))
            }
        }
        var missing: [UInt64] = []
        var sequence = floor + 1
        while sequence < last && missing.count < limit {
            if let range = leapt.first(where: { $0.contains(sequence) }) {
                sequence = range.upperBound + 1
                continue
            }
            if logs[sequence] == nil && !damaged.contains(sequence) { missing.append(sequence) }
            sequence += 1
        }
        return missing
    }

    /// What the local store's metadata says it has applied, and what waits in the container.
    static func localState(
        _ entries: [String: Data],
        schemaVersion: Int,
        reading: StoreFolderReading
    )
        -> LocalStoreState
    {
        let entries = SyncMetadataSnapshot(entries)
        let device = entries[SyncMetadata.device]
        var state = LocalStoreState(device: device, schemaVersion: schemaVersion)
        var tracked = Set(reading.logs.keys)
        for entry in entries.entries(in: SyncMetadata.applied) { tracked.insert(String(entry.suffix)) }
        for other in tracked.sorted() where other != device {
            let applied = AppliedLogs.of(other, in: entries)
            state.applied[other] = applied.through
            if !applied.extra.isEmpty { state.appliedPastGaps[other] = applied.extra }
            let pending = (reading.logs[other] ?? [:]).keys.filter { !applied.contains($0) }.sorted()
            if !pending.isEmpty { state.pending[other] = pending }
        }
        // (The number under its old key only when there is no entry under the new one.)
        state.committed =
            entries.contains(SyncMetadata.sequence)
            ? entries[SyncMetadata.sequence] : entries[SyncMetadata.legacySequence]
        state.outbox = entries.entries(in: SyncMetadata.outbox).count
        state.tombstones =
            entries.entries(in: SyncMetadata.recordClocks).filter { $0.value.map { !$0.isAlive } == true }
            .count
        state.containerIDs = entries[SyncMetadata.container] ?? []
        let marks: [(any SyncMetadataNamed, String)] = [
            (SyncMetadata.contributed, "contributed"), (SyncMetadata.disabled, "disabled"),
            (SyncMetadata.joining, "joining"), (SyncMetadata.deviceIDInUse, "deviceIDInUse"),
            (SyncMetadata.renamedFrom, "newDeviceID"),
        ]
        state.marks = marks.filter { entries.contains($0.0) }.map(\.1)
        return state
    }

    /// Clock disagreements the logs prove.
    ///
    /// - A log is written after every log it depends on was written (its device had applied
    ///   them): a log stamped earlier than one of its dependencies proves that its device's clock
    ///   is behind the other's by at least the difference.
    /// - A device's hybrid clock runs ahead of its wall clock only after it saw a timestamp from
    ///   a clock that is ahead: changes stamped later than the log that carries them was created
    ///   show a clock ahead somewhere.
    /// - A log created in the future of this machine's clock shows its device ahead of this one.
    static func clockSkews(_ reading: StoreFolderReading, now: Date, tolerance: Double = 1) -> [ClockSkew] {
        var worst: [String: ClockSkew] = [:]
        func note(_ skew: ClockSkew) {
            guard skew.seconds >= tolerance else { return }
            let key = skew.behind + "\u{0}" + skew.ahead
            if (worst[key]?.seconds ?? 0) < skew.seconds { worst[key] = skew }
        }
        for (device, logs) in reading.logs {
            for log in logs.values {
                for (other, position) in log.dependencies where other != device && position > 0 {
                    guard let dependency = reading.logs[other]?[position] else { continue }
                    let difference = dependency.created.timeIntervalSince(log.created)
                    note(
                        ClockSkew(
                            behind: device,
                            ahead: other,
                            seconds: difference,
                            evidence:
                                "\(device)'s log \(log.sequence) was created \(seconds(difference)) before "
                                + "\(other)'s log \(position), which it depends on"
                        )
                    )
                }
                if let stamp = log.newestOwnStamp {
                    let difference = Double(stamp) / 1000 - log.created.timeIntervalSince1970
                    note(
                        ClockSkew(
                            behind: device,
                            ahead: "another device",
                            seconds: difference,
                            evidence:
                                "\(device)'s log \(log.sequence) carries timestamps \(seconds(difference)) later "
                                + "than its creation: its hybrid clock caught up with a clock that is ahead"
                        )
                    )
                }
                let future = log.created.timeIntervalSince(now)
                note(
                    ClockSkew(
                        behind: "this machine",
                        ahead: device,
                        seconds: future,
                        evidence:
                            "\(device)'s log \(log.sequence) was created \(seconds(future)) in this machine's future"
                    )
                )
            }
        }
        return worst.values.sorted { ($0.behind, $0.ahead) < ($1.behind, $1.ahead) }
    }

    /// `12.3 s`, `4 min`, `2.5 h`, `3 days`.
    static func seconds(_ value: Double) -> String {
        let value = abs(value)
        if value < 120 { return String(format: "%.1f s", value) }
        if value < 7200 { return String(format: "%.0f min", value / 60) }
        if value < 172_800 { return String(format: "%.1f h", value / 3600) }
        return String(format: "%.0f days", value / 86400)
    }
}

extension ContainerDiagnosis {
    /// What to tell a person about one store folder, each finding with what to do.
    static func findings(
        _ reading: StoreFolderReading,
        layout: ContainerLayout,
        now: Date,
        stale: TimeInterval
    )
        -> [DiagnosisFinding]
    {
        var builder = FindingsBuilder(reading: reading, layout: layout, now: now, stale: stale)
        builder.sentinel()
        builder.sentinelTemporaries()
        builder.identity()
        for device in reading.diagnosis.devices {
            builder.logs(of: device)
            builder.leftovers(of: device)
            builder.requestsAndAcknowledgement(of: device)
        }
        builder.schemaVersions()
        builder.clocks()
        builder.compaction()
        if let local = reading.diagnosis.local {
            builder.found += localFindings(
                local,
                diagnosis: reading.diagnosis,
                layout: layout,
                registered: builder.registered
            )
        }
        return builder.found
    }

    /// What to do about `owner`'s missing log.
    static func repair(owner: String, sequence: UInt64, registered: Set<String>, left: Set<String>) -> String {
        if registered.contains(owner) && !left.contains(owner) {
            return
                "Check that the sync engine has finished (the file may still arrive). Otherwise run the app on "
                + "\(owner) with sync on: devices that wait for it ask for it (requests.json), and \(owner) "
                + "publishes it again from its store."
        }
        return
            "\(owner) is not registered and cannot publish it again: restore it from a backup or the sync engine's "
            + "versions; failing that, the app can give up on it (FolderSync.skipMissingLog), losing what it held."
    }
}
