import FolderSync
import Foundation

// Logs, their payloads, baselines, and the scanner that finds logs in a container.

extension FuzzTarget {
    /// A log file (`*.cclog`): the header, the checksum, every format version. Whatever decodes
    /// encodes back to the same bytes, and its payload's dependencies can be read or refused.
    ///
    /// The input is decoded twice: as it is, and with its last four bytes replaced by the
    /// checksum of the others, so that mutations reach the fields behind the checksum.
    static let log = FuzzTarget("log", "LogFile.decode: a log file as another device wrote it") {
        data,
        url throws(FuzzFinding) in
        if data.count >= 4 {
            var body = [UInt8](data.dropLast(4))
            let checksum = CRC32C.checksum(body)
            for shift in [24, 16, 8, 0] { body.append(UInt8(truncatingIfNeeded: checksum >> UInt32(shift))) }
            if let log = try? LogFile.decode(Data(body), url: url) { try checkLog(log, Data(body)) }
        }
        let log: LogFile
        do {
            log = try LogFile.decode(data, url: url)
        } catch {
            return .rejected(error, namedFile: url)
        }
        try checkLog(log, data)
        return .decoded
    }

    /// What must hold of every log that decodes from `data`.
    private static func checkLog(_ log: LogFile, _ data: Data) throws(FuzzFinding) {
        try check(log.invalidity == nil, "log", "decoded a log that is not writable: \(log.invalidity ?? "")")
        try check(log.encoded() == data, "log", "a decoded log encodes to other bytes")
        // What the scanner reads of every log it finds, and what an import reads.
        _ = try? SyncPayload.dependencies(of: log)
        _ = try? SyncPayload.decode(from: log)
    }

    /// A log's payload (its changes and dependencies): the first byte picks the format version
    /// (1: JSON, 2: binary, 3: binary with dependencies), the rest is the payload. What decodes
    /// encodes and decodes again to the same changes; the dependencies read alone are those
    /// read with the changes.
    static let payload = FuzzTarget("payload", "SyncPayload.decode: a log's changes, JSON or binary") {
        data,
        url throws(FuzzFinding) in
        guard let (version, log) = Self.wrap(data) else { return .rejected(FuzzInputTooShort(), namedFile: nil) }
        let decoded: SyncPayload
        do {
            decoded = try SyncPayload.decode(from: log)
        } catch {
            return .rejected(error, namedFile: nil)
        }
        if version >= 3 {
            let dependencies = try must("payload", "reading the dependencies alone") {
                try SyncPayload.dependencies(of: log)
            }
            try check(
                dependencies == decoded.dependencies,
                "payload",
                "the dependencies read alone differ from those read with the changes"
            )
        }
        let again = try must("payload", "the round trip") { () throws -> SyncPayload in
            var copy = log
            copy.payload = try decoded.encoded(formatVersion: version)
            return try SyncPayload.decode(from: copy)
        }
        let canonical = try must("payload", "the canonical encoding") { try decoded.encoded(formatVersion: 3) }
        try check(
            canonical == (try must("payload", "the canonical encoding") { try again.encoded(formatVersion: 3) }),
            "payload",
            "a decoded payload changes in a round trip through format \(version)"
        )
        return .decoded
    }

    /// A baseline's payload (`baseline-*.ccbase`, written by compaction): the first byte picks
    /// the format version (1 to 5), the rest is the payload. It round-trips, and the total it covers (what
    /// compaction compares baselines by) is computed without overflow.
    static let baseline = FuzzTarget("baseline", "BaselinePayload.decode: a compaction baseline") {
        data,
        url throws(FuzzFinding) in
        // (Formats 1 to 5: the fifth carries the devices' versions.)
        guard let (version, log) = Self.wrap(data, formats: 5) else {
            return .rejected(FuzzInputTooShort(), namedFile: nil)
        }
        let decoded: BaselinePayload
        do {
            decoded = try BaselinePayload.decode(from: log)
        } catch {
            return .rejected(error, namedFile: nil)
        }
        _ = decoded.total
        let again = try must("baseline", "the round trip") { () throws -> BaselinePayload in
            var copy = log
            copy.payload = try decoded.encoded(formatVersion: version)
            return try BaselinePayload.decode(from: copy)
        }
        let canonical = { (payload: BaselinePayload) throws(FuzzFinding) -> Data in
            try must("baseline", "the canonical encoding") { try payload.encoded(formatVersion: 3) }
        }
        try check(
            try canonical(decoded) == (try canonical(again)) && (version < 5 || decoded.versions == again.versions),
            "baseline",
            "a decoded baseline changes in a round trip through format \(version)"
        )
        return .decoded
    }

    /// A log as the scanner finds it in a peer's folder of a container: what decodes with the
    /// header of its place is ready and unchanged, anything else is reported (corrupt or
    /// unsupported), never ready.
    static let logScanner = FuzzTarget("log-scanner", "LogScanner.scan: a peer's log file in a container") {
        data,
        url throws(FuzzFinding) in
        let scratch = FuzzScratch.shared
        // A log goes where its header says it belongs (so real logs are ready), anything else
        // into a peer's folder as its first log.
        let expected = try? LogFile.decode(data, url: scratch.root)
        let place =
            expected.flatMap { $0.device == FuzzScratch.own ? nil : ($0.device, $0.sequence) } ?? (FuzzScratch.peer, 1)
        let fileURL = scratch.layout.logURL(device: place.0, sequence: place.1)
        do {
            try FileManager.default.createDirectory(
                at: fileURL.deletingLastPathComponent(),
                withIntermediateDirectories: true
            )
            try data.write(to: fileURL)
        } catch {
            throw FuzzFinding("log-scanner", "cannot write the scratch log \(fileURL.path): \(error)")
        }
        // The next input starts from an empty container (the usual place's folder is kept: it is
        // the costly part to make again).
        defer {
            if place.0 == FuzzScratch.peer && place.1 == 1 {
                try? FileManager.default.removeItem(at: fileURL)
            } else {
                try? FileManager.default.removeItem(at: fileURL.deletingLastPathComponent())
            }
        }
        let scanner = LogScanner(
            layout: scratch.layout,
            ownDevice: FuzzScratch.own,
            settleInterval: .zero,
            now: { Date.distantFuture }
        )
        let report: ScanReport
        do {
            report = try scanner.scan()
        } catch {
            throw FuzzFinding("log-scanner", "the scan failed: \(error)")
        }
        if let expected, expected.device != FuzzScratch.own {
            try check(
                report.ready.count == 1 && report.ready.first?.log == expected,
                "log-scanner",
                "a valid log is not ready as decoded"
            )
            return .decoded
        }
        try check(report.ready.isEmpty, "log-scanner", "a log that does not decode is ready")
        let errors = report.corrupt + report.unsupported
        try check(
            errors.count == 1,
            "log-scanner",
            "a bad log gave \(errors.count) errors, not 1 (waiting: \(report.waiting.count))"
        )
        return .rejected(errors[0], namedFile: fileURL)
    }

    /// A log of `data`'s first byte's format version holding the rest as its payload.
    private static func wrap(_ data: Data, formats: UInt8 = 3) -> (UInt16, LogFile)? {
        guard let first = data.first else { return nil }
        let version = UInt16(first % formats) + 1
        let log = LogFile(
            device: "fuzz",
            sequence: 1,
            schemaVersion: 1,
            created: Date(timeIntervalSinceReferenceDate: 0),
            payload: Data(data.dropFirst()),
            formatVersion: version
        )
        return (version, log)
    }
}

/// The input is too short to say what it is (no format-version byte).
struct FuzzInputTooShort: Error, CustomStringConvertible {
    var description: String { "an empty input has no format-version byte" }
}

/// The scratch folder of the targets that go through files (a container for the scanner, a store
/// file): made once per process.
package final class FuzzScratch: Sendable {
    static let peer = "fuzz-peer"
    static let own = "fuzz-own"
    static let shared = FuzzScratch()
    let root: URL
    let layout: ContainerLayout

    private init() {
        // `make fuzz` names a folder it removes afterwards; the replay suite removes its own.
        let base =
            ProcessInfo.processInfo.environment["CONCORD_FUZZ_SCRATCH"].map {
                URL(fileURLWithPath: $0, isDirectory: true)
            }
            ?? FileManager.default.temporaryDirectory
        root = base.appendingPathComponent(
            "concord-fuzz-\(ProcessInfo.processInfo.processIdentifier)-\(UUID().uuidString.prefix(8))",
            isDirectory: true
        )
        layout = ContainerLayout(container: root, storeName: "store")
        try? FileManager.default.createDirectory(at: layout.devicesFolder, withIntermediateDirectories: true)
    }

    /// Removes the scratch folder (the replay suite calls it after each target; the targets make
    /// again what they need).
    package static func removeAll() { try? FileManager.default.removeItem(at: shared.root) }
}
