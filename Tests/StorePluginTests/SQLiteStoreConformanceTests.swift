import Persistence
import SQLiteStore
import StoreConformance
import Testing

@Suite("SQLite store conformance")
struct SQLiteStoreConformanceTests {
    @Test("SQLite store passes the store-plugin contract", arguments: StoreConformance.checkNames)
    func conformance(_ check: String) throws {
        try StoreConformance(storeType: SQLiteStore.self).run(check)
    }
}
