import Foundation

// The log file format.
//
// A log is one immutable file a device writes into its own folder of a shared container. Every
// integer is big-endian. Format versions 1, 2 and 3 share this layout; they differ in the payload's
// encoding (1: JSON; 2: the binary form of `SyncBinaryCodec.swift`; 3: the binary form with the
// log's causal dependencies before its changes). Version 4 is version 3 with the identity of the
// container the log was written for at the end of the header:
//
//     offset      size  field
//     0           12    magic, the ASCII bytes "CONCORD-LOG\n"
//     12          2     format version (UInt16), 1 to 4
//     14          2     header length H (UInt16): the bytes from offset 16 to the payload,
//                       exactly 1 + n + 32 in versions 1 to 3, 1 + n + 32 + 1 + c in version 4
//     16          1     n, the length of the device id (1...64)
//     17          n     the device id, ASCII, as `ContainerLayout.isValidDeviceID` accepts
//     17+n        8     sequence (UInt64, 1 or more)
//     25+n        8     schema version of the payload (Int64)
//     33+n        8     created: the IEEE-754 bits of the date's `timeIntervalSinceReferenceDate`
//     41+n        8     payload length P (UInt64, at most `LogFile.maximumPayloadSize`)
//     49+n        1     (version 4) c, the length of the container's identity (0: none; at most 64)
//     50+n        c     (version 4) the container's identity, printable ASCII
//     16+H        P     payload, opaque to this layer
//     16+H+P      4     CRC-32C (Castagnoli) of every byte before it
//
// What every format version keeps, so that a reader can tell a newer, intact log from a damaged
// one: the magic, the version at offset 12, and a CRC-32C of everything before it in the file's
// last 4 bytes. A reader never trusts a length before checking it against the data it holds.

/// One immutable log: the payload a device exported, with the device, its place in that device's
/// sequence, and the schema version the payload was written with.
///
/// ``encoded()`` and ``decode(_:url:)`` convert to and from the versioned, checksummed file
/// format; decoding throws a ``SyncError`` for any file that is not a complete, intact log.
public struct LogFile: Sendable, Hashable {
    /// The device that wrote the log (a valid ``ContainerLayout/isValidDeviceID(_:)``).
    public var device: String
    /// The log's place in its device's sequence: 1, 2, 3, ...
    public var sequence: UInt64
    /// The version of the schema the payload was written with.
    public var schemaVersion: Int
    /// When the log was created, by the writing device's clock.
    public var created: Date
    /// The exported changes, opaque to the file layer.
    public var payload: Data
    /// The identity of the container the writing device had joined when it wrote the log
    /// (format 4; `nil` in earlier formats, and for a container without an identity). A device
    /// that finds a log written for a container that another device has since replaced (its
    /// identity lists this one in `replaces`) does not apply it: the writer had not seen the
    /// replacement, and its log belongs to the container that is gone.
    public var container: String?

    /// The file format version: how the payload is encoded (1: JSON; 2: binary; 3 and 4: binary
    /// with dependencies) and whether the header carries the ``container`` (4).
    public var formatVersion: UInt16

    /// A log, in format `formatVersion` (by default the one new logs are written in).
    public init(
        device: String,
        sequence: UInt64,
        schemaVersion: Int,
        created: Date,
        payload: Data,
        container: String? = nil,
        formatVersion: UInt16 = LogFile.formatVersion
    ) {
        self.device = device
        self.sequence = sequence
        self.schemaVersion = schemaVersion
        self.created = created
        self.payload = payload
        self.container = container
        self.formatVersion = formatVersion
    }

    /// The format version new logs are written in.
    public static let formatVersion: UInt16 = 4
    /// The newest format version ``decode(_:url:)`` reads (it reads every version from 1).
    /// Version 5 is version 4 with a baseline that carries, for each device, the numbers leapt
    /// over and the logs met in several versions (see Docs/Sync.md); only such a
    /// baseline is written in it, so that a Concord that reads up to 4 reads every other file.
    /// Version 6 is version 4 with a log whose payload ends with the incarnations its changes
    /// mean (``SyncPayload/incarnations``); only a log that carries some is written in it.
    public static let newestReadableVersion: UInt16 = 6
    /// The format version of a baseline that carries versions (see ``newestReadableVersion``).
    public static let baselineVersionsVersion: UInt16 = 5
    /// The format version of a log whose payload carries incarnations.
    public static let incarnationsVersion: UInt16 = 6
    /// The bytes every log file starts with.
    public static let magic = Data(magicBytes)
    /// ``magic``'s bytes.
    static let magicBytes = Array("CONCORD-LOG\n".utf8)
    /// The largest payload a log may carry; a file that claims more is corrupt.
    public static let maximumPayloadSize = 256 << 20
    /// The largest file a valid log can be: a reader may refuse to read anything bigger.
    public static let maximumEncodedSize = maximumPayloadSize + fixedSize + 64 + 1 + maximumContainerLength
    /// The longest container identity a log carries.
    public static let maximumContainerLength = 64
    /// Magic, version, header length, device length byte, four 8-byte fields, checksum.
    static let fixedSize = 12 + 2 + 2 + 1 + 32 + 4

    /// Whether ``encoded()`` produces a file that ``decode(_:url:)`` accepts: a valid device id,
    /// a sequence of 1 or more, a finite date and a payload within ``maximumPayloadSize``.
    /// - Returns: why not, or `nil` if it is writable.
    public var invalidity: String? {
        if !ContainerLayout.isValidDeviceID(device) { return "invalid device id \"\(device)\"" }
        if sequence == 0 { return "sequence 0 (sequences start at 1)" }
        if !created.timeIntervalSinceReferenceDate.isFinite { return "a creation date that is not finite" }
        if payload.count > Self.maximumPayloadSize {
            return "a payload of \(payload.count) bytes (at most \(Self.maximumPayloadSize))"
        }
        if let container, !Self.isValidContainer(container) {
            return
                "a container identity \"\(container)\" (1 to \(Self.maximumContainerLength) printable ASCII characters)"
        }
        return nil
    }

    /// The log in the file format described at the top of this file.
    ///
    /// A log with an ``invalidity`` encodes to bytes that ``decode(_:url:)`` rejects; the
    /// ``LogWriter`` refuses to write one.
    public func encoded() -> Data {
        var bytes = encodedHeader(payloadLength: payload.count, reservingCapacity: payload.count + 4)
        bytes.append(contentsOf: payload)
        Self.append(UInt64(CRC32C.checksum(bytes)), width: 4, to: &bytes)
        return Data(bytes)
    }

    /// The file's bytes before the payload, for a payload of `payloadLength` bytes (``payload``
    /// is not looked at): a writer that streams a large payload (a baseline) writes these, the
    /// payload, then the CRC-32C of all of it.
    func encodedHeader(payloadLength: Int, reservingCapacity extraCapacity: Int = 0) -> [UInt8] {
        let deviceBytes = device.utf8.prefix(255)
        // (Before version 4 the container is not written.)
        let containerBytes = (formatVersion >= 4 ? container ?? "" : "").utf8.prefix(255)
        let extra = formatVersion >= 4 ? 1 + containerBytes.count : 0
        var bytes: [UInt8] = []
        bytes.reserveCapacity(Self.fixedSize + deviceBytes.count + extra + extraCapacity)
        bytes.append(contentsOf: Self.magicBytes)
        Self.append(UInt64(formatVersion), width: 2, to: &bytes)
        Self.append(UInt64(1 + deviceBytes.count + 32 + extra), width: 2, to: &bytes)
        bytes.append(UInt8(deviceBytes.count))
        bytes.append(contentsOf: deviceBytes)
        Self.append(sequence, width: 8, to: &bytes)
        Self.append(UInt64(bitPattern: Int64(schemaVersion)), width: 8, to: &bytes)
        Self.append(created.timeIntervalSinceReferenceDate.bitPattern, width: 8, to: &bytes)
        Self.append(UInt64(payloadLength), width: 8, to: &bytes)
        if formatVersion >= 4 {
            bytes.append(UInt8(containerBytes.count))
            bytes.append(contentsOf: containerBytes)
        }
        return bytes
    }

    /// The four bytes a log file ends with: `checksum` (a ``CRC32C`` of every byte before).
    static func encodedChecksum(_ checksum: UInt32) -> [UInt8] {
        var bytes: [UInt8] = []
        append(UInt64(checksum), width: 4, to: &bytes)
        return bytes
    }

    /// Reads a log from the bytes of a file.
    ///
    /// - Parameter data: the file's bytes.
    /// - Parameter url: the file the bytes came from, named in any error.
    /// - Throws: ``SyncError`` with ``SyncError/Code/truncatedLog`` when the data ends before its
    ///   header says it should (an empty file included), ``SyncError/Code/unsupportedLogVersion``
    ///   for an intact file in a newer format, and ``SyncError/Code/corruptLog`` for anything
    ///   else that is not an intact log.
    public static func decode(_ data: Data, url: URL) throws(SyncError) -> LogFile {
        try data.withUnsafeBytes { raw in
            Result { () throws(SyncError) in try decode(raw, url: url) }
        }.get()
    }

    private static func decode(_ bytes: UnsafeRawBufferPointer, url: URL) throws(SyncError) -> LogFile {
        let (log, payload) = try decodeHeader(bytes, fileSize: bytes.count, url: url) { checksumHolds(bytes) }
        var decoded = log
        decoded.payload = Data(bytes[payload])
        return decoded
    }

    /// Reads the header of the log file at `url` and checks its checksum, reading the file in
    /// windows of a megabyte: a log too large to hold (a baseline) is checked without being
    /// held. Returns the log with an empty ``payload`` and where the payload lies in the file.
    /// Throws as ``decode(_:url:)`` does.
    static func decodeHeader(ofFileAt url: URL) throws(SyncError) -> (log: LogFile, payload: Range<Int>) {
        let handle: FileHandle
        do {
            handle = try FileHandle(forReadingFrom: url)
        } catch {
            throw SyncError(.ioFailed, "cannot open the log", url: url, underlying: error)
        }
        defer { try? handle.close() }
        return try decodeHeader(of: handle, url: url)
    }

    /// ``decodeHeader(ofFileAt:)`` of the file open in `handle` (read from its start). Without
    /// `checkingSum`, the checksum is taken to hold and the file is not read past its header.
    static func decodeHeader(
        of handle: FileHandle,
        url: URL,
        checkingSum: Bool = true
    ) throws(SyncError) -> (log: LogFile, payload: Range<Int>) {
        func failure(_ error: any Error) -> SyncError {
            SyncError(.ioFailed, "cannot read the log", url: url, underlying: error)
        }
        let size: Int
        let prefix: Data
        do {
            size = Int(try handle.seekToEnd())
            try handle.seek(toOffset: 0)
            // The longest header there is, and the checksum after an empty payload.
            prefix = try handle.read(upToCount: 16 + 1 + 255 + 32 + 1 + 255 + 4) ?? Data()
        } catch {
            throw failure(error)
        }
        // Everything but the last four bytes, streamed through the checksum.
        var readFailure: (any Error)?
        func checksumHolds() -> Bool {
            guard size >= 4 else { return false }
            guard checkingSum else { return true }
            do {
                try handle.seek(toOffset: 0)
                var crc = CRC32C.initial
                var left = size - 4
                while left > 0 {
                    guard let chunk = try handle.read(upToCount: min(left, 1 << 20)), !chunk.isEmpty else {
                        return false
                    }
                    crc = chunk.withUnsafeBytes { CRC32C.update(crc, $0) }
                    left -= chunk.count
                }
                guard let stored = try handle.read(upToCount: 4), stored.count == 4 else { return false }
                return stored.withUnsafeBytes { UInt32(read($0, at: 0, width: 4)) } == CRC32C.finalize(crc)
            } catch {
                readFailure = error
                return false
            }
        }
        let outcome = prefix.withUnsafeBytes { raw in
            Result { () throws(SyncError) in
                try decodeHeader(raw, fileSize: size, url: url, checksumHolds: checksumHolds)
            }
        }
        if let readFailure { throw failure(readFailure) }
        return try outcome.get()
    }

    /// The header checks and fields of ``decode(_:url:)``, from `bytes`, the first bytes of a file
    /// of `fileSize` bytes (all of them, or at least the header), with `checksumHolds` saying
    /// whether the file's checksum holds. Returns the log with an empty payload and the payload's
    /// place in the file.
    private static func decodeHeader(
        _ bytes: UnsafeRawBufferPointer,
        fileSize count: Int,
        url: URL,
        checksumHolds: () -> Bool
    ) throws(SyncError) -> (LogFile, Range<Int>) {
        func corrupt(_ message: String) -> SyncError { SyncError(.corruptLog, message, url: url) }
        func truncated(_ message: String) -> SyncError { SyncError(.truncatedLog, message, url: url) }
        let magic = Self.magic
        // The magic: a prefix of it is a file still arriving; anything else is not a log.
        let magicPrefix = min(count, magic.count)
        guard bytes[0..<magicPrefix].elementsEqual(magic.prefix(magicPrefix)) else {
            throw corrupt("not a log file (wrong magic)")
        }
        guard count >= 16 else { throw truncated("\(count) bytes, shorter than a log's fixed header") }
        let version = UInt16(read(bytes, at: 12, width: 2))
        guard version >= 1, version <= newestReadableVersion else {
            if version == 0 { throw corrupt("format version 0") }
            if version > newestReadableVersion, count >= 20, checksumHolds() {
                throw SyncError(
                    .unsupportedLogVersion,
                    "log format version \(version); this version of Concord reads up to \(newestReadableVersion)",
                    url: url
                )
            }
            throw corrupt("format version \(version) with a checksum that does not hold (damaged or incomplete)")
        }
        let headerLength = Int(read(bytes, at: 14, width: 2))
        let containerRoom = version >= 4 ? 1 + maximumContainerLength : 0
        guard headerLength >= 1 + 1 + 32 + (version >= 4 ? 1 : 0), headerLength <= 1 + 64 + 32 + containerRoom else {
            throw corrupt("header length \(headerLength) out of range")
        }
        guard count >= 16 + headerLength, bytes.count >= 16 + headerLength else {
            throw truncated("\(count) bytes, shorter than the header")
        }
        let deviceLength = Int(bytes[16])
        // Version 4: the container's length byte follows the four 8-byte fields.
        let containerLength =
            version >= 4 && 1 + deviceLength + 32 < headerLength ? Int(bytes[16 + 1 + deviceLength + 32]) : 0
        guard 1 + deviceLength + 32 + (version >= 4 ? 1 + containerLength : 0) == headerLength else {
            throw corrupt("device id length \(deviceLength) does not fit header length \(headerLength)")
        }
        var offset = 17 + deviceLength
        let rawPayloadLength = read(bytes, at: offset + 24, width: 8)
        guard rawPayloadLength <= UInt64(maximumPayloadSize) else {
            throw corrupt("payload length \(rawPayloadLength) exceeds the maximum \(maximumPayloadSize)")
        }
        let payloadStart = 16 + headerLength
        let total = payloadStart + Int(rawPayloadLength) + 4
        guard count >= total else { throw truncated("\(count) bytes of \(total)") }
        guard count == total else { throw corrupt("\(count - total) bytes after the checksum") }
        guard checksumHolds() else { throw corrupt("checksum mismatch") }
        // Only now, with the checksum holding, are the fields worth reading.
        guard let device = String(validating: bytes[17..<offset], as: UTF8.self),
            ContainerLayout.isValidDeviceID(device)
        else { throw corrupt("invalid device id in header") }
        let sequence = read(bytes, at: offset, width: 8)
        offset += 8
        guard sequence > 0 else { throw corrupt("sequence 0") }
        guard let schemaVersion = Int(exactly: Int64(bitPattern: read(bytes, at: offset, width: 8))) else {
            throw corrupt("schema version out of range")
        }
        offset += 8
        let interval = Double(bitPattern: read(bytes, at: offset, width: 8))
        guard interval.isFinite else { throw corrupt("creation date is not a finite number") }
        var container: String?
        if containerLength > 0 {
            let start = payloadStart - containerLength
            guard let text = String(validating: bytes[start..<payloadStart], as: UTF8.self), isValidContainer(text)
            else { throw corrupt("invalid container identity in header") }
            container = text
        }
        let log = LogFile(
            device: device,
            sequence: sequence,
            schemaVersion: schemaVersion,
            created: Date(timeIntervalSinceReferenceDate: interval),
            payload: Data(),
            container: container,
            formatVersion: version
        )
        return (log, payloadStart..<(total - 4))
    }

    /// Whether `container` can be written in a log: 1 to ``maximumContainerLength`` printable
    /// ASCII characters (a UUID string is 36).
    static func isValidContainer(_ container: String) -> Bool {
        let utf8 = container.utf8
        return (1...maximumContainerLength).contains(utf8.count) && utf8.allSatisfy { (0x21...0x7E).contains($0) }
    }

    /// Whether the last four bytes are the CRC-32C of the others. `bytes.count >= 4`.
    private static func checksumHolds(_ bytes: UnsafeRawBufferPointer) -> Bool {
        let body = UnsafeRawBufferPointer(rebasing: bytes[..<(bytes.count - 4)])
        return UInt32(read(bytes, at: bytes.count - 4, width: 4)) == CRC32C.checksum(body)
    }

    /// The big-endian unsigned integer of `width` bytes at `offset`; the caller checked the bounds.
    private static func read(_ bytes: UnsafeRawBufferPointer, at offset: Int, width: Int) -> UInt64 {
        var value: UInt64 = 0
        for index in offset..<(offset + width) { value = value << 8 | UInt64(bytes[index]) }
        return value
    }

    private static func append(_ value: UInt64, width: Int, to bytes: inout [UInt8]) {
        for shift in stride(from: (width - 1) * 8, through: 0, by: -8) {
            bytes.append(UInt8(truncatingIfNeeded: value >> shift))
        }
    }
}
