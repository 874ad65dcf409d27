import Foundation
import JSONStore
import Persistence
import PlistStore

// The whole-file store archives: a JSON or property-list store file, as another process (or a
// sync engine carrying a data folder) left it.

extension FuzzTarget {
    /// A JSON store file: decoding throws only ``PersistenceError``s naming the file; what decodes
    /// encodes, and that encoding is stable (decoding it and encoding again gives the same bytes).
    static let jsonStore = FuzzTarget("json-store", "JSONStore.decode: a JSON store file") { data, url throws(FuzzFinding) in
        try storeRoundTrip(JSONStore.self, "json-store", data, url)
    }

    /// A property-list store file (binary or XML), with the same properties as ``jsonStore``.
    static let plistStore = FuzzTarget("plist-store", "PlistStore.decode: a binary or XML property-list store file") { data, url throws(FuzzFinding) in
        try storeRoundTrip(PlistStore.self, "plist-store", data, url)
    }

    private static func storeRoundTrip(
        _ store: WholeFileStore.Type, _ target: String, _ data: Data, _ url: URL
    ) throws(FuzzFinding) -> FuzzOutcome {
        let options = StoreOptions(presentsFiles: false)
        let snapshot: StoreSnapshot
        do {
            snapshot = try store.decode(data, url: url, options: options)
        } catch let error as PersistenceError {
            try check(error.url == url, target, "an error that does not name the file: \(error)")
            return .rejected(error, namedFile: url)
        } catch {
            throw FuzzFinding(target, "an error that is not a PersistenceError: \(type(of: error)) \(error)")
        }
        let encoded = try must(target, "encoding") { try store.encode(snapshot, options: options) }
        let again = try must(target, "decoding what was encoded") { try store.decode(encoded, url: url, options: options) }
        let reencoded = try must(target, "encoding again") { try store.encode(again, options: options) }
        try check(reencoded == encoded, target, "a decoded store's encoding is not stable")
        try check(again.records.count == snapshot.records.count && again.metadata.entries == snapshot.metadata.entries
            && again.schema == snapshot.schema, target, "a decoded store changes in a round trip")
        return .decoded
    }
}
