import FileCoordination
import Foundation
import Persistence
import Synchronization

/// A device's requests for logs it cannot read (`requests.json` in its own folder: a device
/// writes only its own files). Each owner answers the requests naming it by publishing those logs
/// again from its outbox.
public struct SyncLogRequests: Codable, Sendable, Hashable {
    /// The device asking.
    public var device: String
    /// For each device asked, the numbers of the logs wanted.
    public var logs: [String: [UInt64]]

    /// A set of requests.
    public init(device: String, logs: [String: [UInt64]]) {
        self.device = device
        self.logs = logs
    }
}

/// What healing remembers in one process.
struct HealingState: Sendable {
    /// How long a log may be missing before it is reported and asked for.
    var gracePeriod: Duration = .seconds(10)
    /// Missing logs already reported, by "device/sequence".
    var reported: Set<String> = []
    /// When this process first saw each missing log missing.
    var firstSeen: [String: Date] = [:]
    /// What this process last wrote as its requests (to write only changes).
    var lastRequests: SyncLogRequests?
}

/// Missing logs: noticed when they hold others back, reported once their grace period is over,
/// and asked for from their devices (``SyncLogRequests``); given up on when the app says so.
final class Healer: SyncPart, Sendable {
    let context: SyncContext
    /// What healing remembers: missing logs seen and reported, requests written.
    private let state = Mutex(HealingState())

    init(context: SyncContext) { self.context = context }

    /// The name of the file in which a device asks for logs it cannot read.
    static let requestsName = "requests.json"

    /// How long a log that holds others back may be missing (or damaged) before it is reported
    /// (``SyncEvent/missingLog(device:sequence:url:)``) and asked for. Ten seconds by default: a
    /// file-sync engine usually delivers a device's files within that, in whatever order.
    var missingLogGracePeriod: Duration {
        get { state.withLock { $0.gracePeriod } }
        set { state.withLock { $0.gracePeriod = newValue } }
    }

    /// Gives up on a log that its device cannot publish again (a device gone for good, its log
    /// lost): it counts as applied, empty, so the logs after it (and those that depend on it) are
    /// applied. What it held is missing on this device until the log turns up (it is applied
    /// then, whenever that is); call it only when the app decides so, for example from the
    /// handler of ``SyncEvent/missingLog(device:sequence:url:)`` after a bound of its own. By
    /// default sync never gives up: it keeps waiting, and asking.
    func skipMissingLog(device: String, sequence: UInt64) throws {
        try syncLock.withLock { _ in
            var applied = AppliedLogs.of(
                device,
                in: try store.syncMetadata([SyncMetadata.applied(device)])
            )
            guard !applied.contains(sequence) else { return }
            applied.insert(sequence)
            // Applied empty: should the log turn up after all, it is applied then.
            var versions = try versionsApplied(of: [device])[device] ?? LogVersions()
            versions.noteApplied(sequence, digest: 0)
            var changes = SyncMetadataChanges()
            try changes.set(SyncMetadata.applied(device), applied)
            try Self.setVersionsApplied(versions, of: device, in: &changes)
            try store.commit(StoreChanges(syncMetadata: changes))
            logger.warning(
                "gave up on a missing log",
                metadata: ["concord.file": "\(layout.logURL(device: device, sequence: sequence).path)"]
            )
        }
    }

    /// Notes the logs an import found missing or damaged: once one has held others back for the
    /// grace period (by this process's watch, or by the age of the files it holds back), it is
    /// reported once and asked for; requests for logs no longer missing are withdrawn. Returns
    /// this device's own logs that are due (the caller publishes them again at once).
    func noteMissing(
        _ missing: [(device: String, sequence: UInt64)],
        gated: Set<String>,
        applied: [String: AppliedLogs]
    ) throws -> [UInt64] {
        let now = now()
        let grace = state.withLock { $0.gracePeriod }
        let seconds = Double(grace.components.seconds) + Double(grace.components.attoseconds) / 1e18
        var due: [(device: String, sequence: UInt64)] = []
        for (device, sequence) in missing where !gated.contains(device) {
            let key = "\(device)/\(sequence)"
            let first = state.withLock { state in
                if state.firstSeen[key] == nil { state.firstSeen[key] = now }
                return state.firstSeen[key]!
            }
            // A one-shot process sees the gap once: the files it holds back tell how old it is.
            let evidence = oldestLaterLog(of: device, after: sequence)
            let age = max(now.timeIntervalSince(first), evidence.map { now.timeIntervalSince($0) } ?? 0)
            if age >= seconds || isDamaged(device: device, sequence: sequence) { due.append((device, sequence)) }
        }
        for (device, sequence) in due {
            let url = layout.logURL(device: device, sequence: sequence)
            let first = state.withLock { $0.reported.insert("\(device)/\(sequence)").inserted }
            guard first else { continue }
            logger.warning(
                "a log is missing or damaged and holds others back; asking its device for it",
                metadata: ["concord.file": "\(url.path)", "concord.device": "\(device)"]
            )
            emit(.missingLog(device: device, sequence: sequence, url: url))
        }
        var wanted: [String: [UInt64]] = [:]
        for (device, sequence) in due where device != deviceID {
            wanted[device, default: []] += try missingRun(of: device, from: sequence, applied: applied[device])
        }
        try writeRequests(SyncLogRequests(device: deviceID, logs: wanted.mapValues { $0.sorted() }))
        let stillMissing = Set(missing.map { "\($0.device)/\($0.sequence)" })
        state.withLock { state in
            state.firstSeen = state.firstSeen.filter { stillMissing.contains($0.key) }
            state.reported = state.reported.filter { stillMissing.contains($0) }
        }
        return due.filter { $0.device == deviceID }.map(\.sequence)
    }

    /// How many numbers one request names at most for a device, from a missing log on.
    static let requestRunLimit: UInt64 = 1024

    /// `sequence` and the numbers after it that are missing too, up to the next log of `device`
    /// in the container (at most ``requestRunLimit``): asked for together, they come back
    /// together, not one round trip each. Numbers applied, and those the device's numbering
    /// leapt over (watched, never asked for: the next log names the one it follows), are left
    /// out.
    private func missingRun(of device: String, from sequence: UInt64, applied: AppliedLogs?) throws -> [UInt64] {
        let next = (try? layout.logSequences(device: device))?.first { $0 > sequence }
        guard let next, next > sequence + 1 else { return [sequence] }
        var end = min(next - 1, sequence + Self.requestRunLimit - 1)
        let url = layout.logURL(device: device, sequence: next)
        if let data = Data(contentsOf: url, atMost: LogFile.maximumEncodedSize),
            let log = try? LogFile.decode(data, url: url),
            let follows = (try? SyncPayload.dependencies(of: log))?[device]
        {
            end = min(end, follows)
        }
        guard end > sequence else { return [sequence] }
        let versions = try versionsApplied(of: [device])[device] ?? LogVersions()
        return [sequence]
            + ((sequence + 1)...end).filter { number in
                applied?.contains(number) != true && !versions.isVoid(number)
            }
    }

    /// The modification date of the oldest log of `device` after `sequence` in the container.
    private func oldestLaterLog(of device: String, after sequence: UInt64) -> Date? {
        guard let later = (try? layout.logSequences(device: device))?.first(where: { $0 > sequence }) else {
            return nil
        }
        return SyncFiles.modificationDate(of: layout.logURL(device: device, sequence: later))
    }

    /// Whether the log is there but does not decode (damaged, or cut short) and has stopped changing.
    func isDamaged(device: String, sequence: UInt64) -> Bool {
        let url = layout.logURL(device: device, sequence: sequence)
        guard let data = Data(contentsOf: url, atMost: LogFile.maximumEncodedSize) else { return false }
        guard (try? LogFile.decode(data, url: url)) == nil else { return false }
        let modified = SyncFiles.modificationDate(of: url)
        return modified.map { now().timeIntervalSince($0) >= scanner.settleSeconds } ?? false
    }

    /// Writes this device's requests, if they changed (an empty set removes the file).
    private func writeRequests(_ requests: SyncLogRequests) throws {
        let changed = state.withLock { state -> Bool in
            defer { state.lastRequests = requests }
            return state.lastRequests != requests
        }
        let url = layout.deviceFolder(deviceID).appendingPathComponent(Self.requestsName)
        guard changed || (requests.logs.isEmpty ? false : !SyncFiles.exists(url)) else {
            return
        }
        do {
            if requests.logs.isEmpty {
                if SyncFiles.exists(url) { try FileCoordinator().removeItem(at: url) }
                return
            }
            let encoder = JSONEncoder()
            encoder.outputFormatting = [.sortedKeys]
            try FileCoordinator().replaceContentsOfItem(at: url, with: try encoder.encode(requests))
        } catch {
            throw SyncError(
                .ioFailed,
                "cannot write this device's requests for missing logs",
                url: url,
                underlying: error
            )
        }
    }

    /// What the other devices' requests ask for, by the device asked (numbers past any plausible
    /// one are damage, and left out).
    func requestsOfOthers() -> [String: Set<UInt64>] {
        let folders = SyncFiles.names(in: layout.devicesFolder)
            .filter { ContainerLayout.isValidDeviceID($0) && $0 != deviceID }
        var asked: [String: Set<UInt64>] = [:]
        for device in folders {
            let url = layout.deviceFolder(device).appendingPathComponent(Self.requestsName)
            guard let data = Data(contentsOf: url, atMost: 1 << 20),
                let requests = try? JSONDecoder().decode(SyncLogRequests.self, from: data)
            else { continue }
            // (Log numbers start at 1; a request past any plausible number is damage.)
            for (owner, numbers) in requests.logs {
                asked[owner, default: []].formUnion(numbers.filter { $0 > 0 && $0 < Self.plausibleSequences })
            }
        }
        return asked
    }
}
